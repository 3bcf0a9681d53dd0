"""kcache.triton: kcache as Triton's kernel cache, with real Triton from PyPI
(the test extra), compiling for an explicit target (GPUTarget("cuda", 90, 32),
ptxas from the Triton wheel): no GPU. Herds and killed owners are real
processes (triton_worker.py); the team remote is a real redis-server.

Skips only when Triton cannot be imported and KCACHE_REQUIRE_TOOLKIT is unset
(CI sets it: there a missing Triton fails)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import kcache

from conftest import kcache_cli, run_python

try:
    import triton  # noqa: F401

    _missing = None
except ImportError as e:  # pragma: no cover - depends on the environment
    _missing = str(e)

if _missing is not None:
    if os.environ.get("KCACHE_REQUIRE_TOOLKIT"):
        raise ImportError(f"KCACHE_REQUIRE_TOOLKIT is set but Triton cannot be imported: {_missing}")
    pytest.skip(f"triton is not installed ({_missing}); scripts/python-venv.sh test installs it",
                allow_module_level=True)

import kcache._triton_files  # noqa: E402
import kcache.triton  # noqa: E402
import triton_worker  # noqa: E402

WORKER = str(Path(__file__).with_name("triton_worker.py"))


@pytest.fixture(autouse=True)
def _fp_fusion_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # Triton 3.9 warns once per process while this is unset; it is in Triton's key either way.
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")


@pytest.fixture
def tstore(tmp_path: Path):
    """A fresh store (synchronous puts) installed as Triton's cache; uninstalled after."""
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache", put="sync"))
    kcache.triton.install(store=s)
    yield s
    kcache.triton.uninstall()
    s.close()


@pytest.fixture
def xdg(tmp_path: Path):
    """A private XDG_RUNTIME_DIR for a test's worker processes (their memory root, on /dev/shm
    when there is one): what they leave there is the test's to check; removed after it."""
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    d = Path(tempfile.mkdtemp(prefix="kcache-test-xdg-", dir=shm))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def reopen(store: kcache.Store) -> kcache.Store:
    """A new store over the same cache directory (an empty memory tier, as a new process has)."""
    s = kcache.open_store(kcache.Config.load(cache_dir=store.config.cache_dir, put="sync"))
    kcache.triton.install(store=s)
    return s


def compile_counted(variants: list[int]) -> dict:
    return triton_worker.compile_variants(variants)


def entry_files(store: kcache.Store, key: kcache.Key) -> tuple[Path, Path]:
    shard = Path(store.config.cache_dir) / "v1" / "entries" / key.hex[:2]
    return shard / key.hex, shard / (key.hex + ".pass")


@pytest.fixture(scope="module")
def warm_memo(tmp_path_factory: pytest.TempPathFactory):
    """Seeds a cache directory with the triton_key() memo (computed once, by a real process), so
    that worker processes do not each hash libtriton.so: seed(cache_dir)."""
    d = tmp_path_factory.mktemp("memo") / "cache"
    r = run_python("import kcache.triton; kcache.triton.install(); import triton.runtime.cache as tc; tc.triton_key()",
                   {"KCACHE_DIR": str(d)})
    assert r.returncode == 0, r.stderr
    memos = list((d / "v1" / "triton").glob("key-*.json"))
    assert len(memos) == 1

    def seed(cache_dir: Path) -> None:
        (cache_dir / "v1" / "triton").mkdir(parents=True, exist_ok=True)
        shutil.copy(memos[0], cache_dir / "v1" / "triton" / memos[0].name)

    return seed


def worker(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, *args], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def triton_requests(cache_dir: Path) -> dict:
    """The requests of the route "triton" counted in `cache_dir` (as `kcache stats` shows them)."""
    with kcache.open_store(kcache.Config.load(cache_dir=cache_dir)) as s:
        return s.stats()["requests"]["routes"].get("triton", {"total": 0})


# ---- the module ----------------------------------------------------------------------------------


def test_import_does_not_import_triton() -> None:
    # Cheap: nothing beyond what `import kcache` loads but struct (no Triton, no hashlib, no threading).
    r = run_python("import sys; import kcache; before = set(sys.modules); import kcache.triton; "
                   "print('triton' in sys.modules, kcache.triton.GROUP_KIND, "
                   "sorted(set(sys.modules) - before - {'kcache.triton', 'kcache._triton_files', 'kcache._integration', "
                   "'struct', '_struct'}))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "triton-group", "[]"]


def test_group_container_is_deterministic_and_strict() -> None:
    files = {"b.cubin": b"\x7fELF" + bytes(range(256)), "a.json": b"{}"}
    packed = kcache.triton.pack_group(files)
    assert packed == kcache.triton.pack_group(dict(reversed(list(files.items()))))
    assert kcache.triton.unpack_group(packed) == files
    for bad in (packed[:-1], packed + b"x", b"X" + packed[1:], packed[:30]):
        with pytest.raises(ValueError):
            kcache.triton.unpack_group(bad)
    for name in ("", "a/b", "..", "x\0y"):
        with pytest.raises(ValueError):
            kcache.triton.pack_group({name: b""})


# ---- one entry per group, verified reads --------------------------------------------------------


def test_a_group_is_one_verified_entry_with_a_passport(tstore: kcache.Store) -> None:
    first = compile_counted([0])
    assert (first["compiles"], first["hits"]) == (1, 0)
    entries = tstore.list()
    assert [e.kind for e in entries] == [kcache.triton.GROUP_KIND]
    got = tstore.get(entries[0].key)
    p = got.passport
    assert p["producer"] == {"name": "triton", "version": triton.__version__}
    assert p["target"]["arch"] == "sm_90a"
    assert p["labels"]["triton.kernel"] == "add_kernel" and p["labels"]["triton.target"] == "cuda:90:32"
    files = kcache.triton.unpack_group(got.payload)
    assert {"add_kernel.cubin", "add_kernel.json", "add_kernel.ptx"} <= set(files)
    assert hashlib.sha256(files["add_kernel.cubin"]).hexdigest() == first["cubins"]["0"]
    # A new process (an empty memory tier) hits, and gets the same bytes.
    s2 = reopen(tstore)
    try:
        again = compile_counted([0])
    finally:
        s2.close()
    assert (again["compiles"], again["hits"]) == (0, 1) and again["cubins"] == first["cubins"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "edited"])
def test_a_damaged_group_is_recompiled_never_served(tstore: kcache.Store, damage: str) -> None:
    first = compile_counted([1])
    (key,) = [e.key for e in tstore.list()]
    payload, _ = entry_files(tstore, key)
    data = bytearray(payload.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) - 100]
    else:  # the group edited in place: another valid container, the passport left alone
        files = kcache.triton.unpack_group(bytes(data))
        cubin = bytearray(files["add_kernel.cubin"])
        cubin[-1] ^= 0xFF
        files["add_kernel.cubin"] = bytes(cubin)
        data = bytearray(kcache.triton.pack_group(files))
        data = data[: payload.stat().st_size]  # same size: only the digest can tell
    payload.write_bytes(bytes(data))
    s2 = reopen(tstore)
    try:
        again = compile_counted([1])
        assert (again["compiles"], again["hits"]) == (1, 0)
        assert again["cubins"] == first["cubins"]  # the recompiled bytes, not the damaged ones
        assert s2.stats()["corrupt"] == 1
        got = s2.get(key)
        assert got is not None and hashlib.sha256(
            kcache.triton.unpack_group(got.payload)["add_kernel.cubin"]).hexdigest() == first["cubins"]["1"]
    finally:
        s2.close()


@pytest.mark.parametrize("lack", ["cubin", "target", "text", "first-json"])
def test_a_group_lacking_what_triton_reads_is_a_miss_and_compiled_again(tstore: kcache.Store, lack: str) -> None:
    # A group that verifies as an entry (its passport names these very bytes)
    # but lacks what Triton's CompiledKernel reads: a miss, removed, compiled
    # again; never Triton's KeyError in every process that hits it.
    first = compile_counted([3])
    (entry,) = tstore.list()
    got = tstore.get(entry.key)
    files = kcache.triton.unpack_group(got.payload)
    if lack == "cubin":
        del files["add_kernel.cubin"]
    elif lack == "target":
        meta = json.loads(files["add_kernel.json"])
        del meta["target"]
        files["add_kernel.json"] = json.dumps(meta).encode()
    elif lack == "text":
        files["add_kernel.ptx"] = b"\xff\xfe" + files["add_kernel.ptx"]
    else:  # another JSON file sorts first: Triton would take it for the metadata
        files["a.json"] = b"{}"
    p = got.passport
    fields = [(f["name"], f["value"]) for f in p["key_record"]["fields"]]
    bad = kcache._kcache._record_artifact("triton", fields, kcache.triton.GROUP_KIND, kcache.triton.pack_group(files),
                                          "triton", p["producer"]["version"], p["target"]["arch"], p["labels"])
    assert bad.key.hex == entry.key.hex
    tstore.remove(entry.key)
    tstore.put(bad)
    kcache.triton._warned.clear()
    s2 = reopen(tstore)
    try:
        with pytest.warns(RuntimeWarning, match="is not a usable Triton group"):
            again = compile_counted([3])
        assert (again["compiles"], again["hits"]) == (1, 0) and again["cubins"] == first["cubins"]
        fixed = kcache.triton.unpack_group(s2.get(entry.key).payload)
        assert kcache._triton_files.missing_for_triton("add_kernel.json", fixed) is None
    finally:
        s2.close()


def test_a_group_lacking_its_binary_is_never_published(tstore: kcache.Store) -> None:
    kcache.triton._warned.clear()
    meta = json.dumps({"name": "k", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}})
    m = kcache.triton.KCacheManager("f" * 64)
    assert m.get_group("k.json") is None  # a miss: this manager holds the key
    path = m.put(meta, "k.json", binary=False)
    with pytest.warns(RuntimeWarning, match=r"group k.json is not cached: it holds no .cubin file"):
        m.put_group("k.json", {"k.json": path})
    assert tstore.list() == []
    # The key was given up: the next compile of it publishes a complete group.
    m2 = kcache.triton.KCacheManager("f" * 64)
    assert m2.get_group("k.json") is None
    group = {"k.json": m2.put(meta, "k.json", binary=False), "k.cubin": m2.put(b"\x7fELF cubin", "k.cubin")}
    m2.put_group("k.json", group)
    assert [e.kind for e in tstore.list()] == [kcache.triton.GROUP_KIND]


def test_a_fifo_at_the_key_memo_never_blocks(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = ("import kcache._triton_key as k, triton.runtime.cache as tc, os; "
            "p = k.memo_path(os.environ['KCACHE_DIR'], tc); os.makedirs(os.path.dirname(p), exist_ok=True); "
            "os.mkfifo(p); print(k._read_valid(p, 'x'))")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KCACHE_DIR": str(cache)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "None"


def test_a_materialized_file_edited_in_the_process_is_written_again(tstore: kcache.Store) -> None:
    compile_counted([2])
    m = kcache.triton.KCacheManager
    (entry,) = tstore.list()
    key = tstore.get(entry.key).passport["labels"]["triton.key"]
    g1 = m(key).get_group("add_kernel.json")
    assert g1 is not None
    good = Path(g1["add_kernel.cubin"]).read_bytes()
    Path(g1["add_kernel.cubin"]).write_bytes(b"not a cubin")
    g2 = m(key).get_group("add_kernel.json")
    assert g2["add_kernel.cubin"] != g1["add_kernel.cubin"]
    assert Path(g2["add_kernel.cubin"]).read_bytes() == good


def test_staged_files_removed_mid_compile_are_written_again(tstore: kcache.Store) -> None:
    # A cleaner removes the directory of a compile's staged files between Triton's put()s and
    # its put_group(): the group is still published whole, and the dict Triton then builds its
    # CompiledKernel from points to files that exist and hold the bytes put.
    m = kcache.triton.KCacheManager("RESTAGEKEY")
    assert m.get_group("k.json") is None  # a miss: this manager holds the key
    meta = b'{"name": "k", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}'
    data = {"k.ttir": b"ttir bytes", "k.cubin": b"\x7fELF cubin", "k.json": meta}
    group = {name: m.put(raw, name) for name, raw in data.items()}
    shutil.rmtree(Path(group["k.ttir"]).parent)
    assert m.put_group("k.json", group) == group["k.json"]
    assert {n: Path(p).read_bytes() for n, p in group.items()} == data
    (entry,) = tstore.list()
    assert kcache.triton.unpack_group(tstore.get(entry.key).payload) == data


def test_a_file_triton_caches_alone_is_one_entry(tstore: kcache.Store) -> None:
    # triton.runtime.build's launcher .so: get_file (a miss takes the key), then put.
    m = kcache.triton.KCacheManager
    assert m("LAUNCHERKEY").get_file("launcher.so") is None
    path = m("LAUNCHERKEY").put(b"\x7fELF launcher", "launcher.so")
    assert Path(path).read_bytes() == b"\x7fELF launcher"
    assert [e.kind for e in tstore.list()] == [kcache.triton.FILE_KIND]
    s2 = reopen(tstore)
    try:
        got = m("LAUNCHERKEY").get_file("launcher.so")
        assert got is not None and Path(got).read_bytes() == b"\x7fELF launcher"
        assert m("LAUNCHERKEY").has_file("launcher.so") and not m("OTHERKEY").has_file("launcher.so")
    finally:
        s2.close()


def test_dump_mode_keeps_tritons_own_manager(tstore: kcache.Store, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    m = kcache.triton.KCacheManager("DUMPKEY", dump=True)
    path = m.put(b"ir", "k.ttir")
    assert Path(path).parent == tmp_path / "dump" / "DUMPKEY" and tstore.list() == []


# ---- one compile per key ------------------------------------------------------------------------


def test_herd_compiles_each_kernel_once(tmp_path: Path, warm_memo) -> None:
    # N processes x V variants into one fresh cache at the same moment, twice
    # (the second round on a fresh cache again): exactly V compiles, the same
    # cubins everywhere.
    n, variants = 4, [0, 1, 2]
    for rnd in range(2):
        go = tmp_path / f"go{rnd}"
        env = {"KCACHE_DIR": str(tmp_path / f"cache{rnd}")}
        warm_memo(tmp_path / f"cache{rnd}")
        procs = [worker(["compile", ",".join(map(str, variants)), "--go", str(go)], env) for _ in range(n)]
        time.sleep(0.5)  # let them import Triton; the herd starts on the file, not on this sleep
        go.touch()
        results = [finish(p) for p in procs]
        assert sum(r["compiles"] for r in results) == len(variants), results
        assert sum(r["hits"] for r in results) == len(variants) * (n - 1), results
        assert all(r["cubins"] == results[0]["cubins"] for r in results)
        assert len(set(results[0]["cubins"].values())) == len(variants)
        # `kcache stats` counts one request per kernel per process: V compiled, the rest served.
        req = triton_requests(tmp_path / f"cache{rnd}")
        assert (req["total"], req["compiled"], req["served"]["total"]) == (n * len(variants), len(variants),
                                                                           len(variants) * (n - 1)), req


def test_herd_while_renames_and_unlinks_race_on_the_cache_directory(tmp_path: Path, warm_memo, xdg: Path) -> None:
    # The herd again, round after round (each round on cold keys), on a cache directory
    # where the store's renames race with unlinks and renames of another process (the
    # janitor of triton_worker.py: entries removed, unlinked behind the store's back,
    # renamed over each other, `kcache clear` / `prune`, the shared run root removed, dead
    # processes' directories planted for the sweeps), while every process also removes
    # its own directories and reads its groups again (a store read and a write of new
    # files at the same moment the janitor unlinks them). Upstream Triton fails here
    # (EBUSY, FileNotFoundError: triton-lang/triton#11512). What must hold, every round:
    # no compile fails, and every process got the same whole group for each kernel.
    n, variants, count, reads = 3, [0, 1], 8, 2
    cache = tmp_path / "cache"
    warm_memo(cache)
    sync = tmp_path / "sync"
    sync.mkdir()
    env = {"KCACHE_DIR": str(cache), "XDG_RUNTIME_DIR": str(xdg)}
    cli = kcache_cli()
    try:
        procs = [worker(["rounds", ",".join(map(str, variants)), str(count), str(sync), str(reads)], env)
                 for _ in range(n)]
        janitor = worker(["janitor", str(cache), str(sync / "stop"), "19", *([cli] if cli else [])], env)
        for r in range(count):
            deadline = time.monotonic() + 120
            while len(list(sync.glob(f"ready-{r}-*"))) < n:
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                    [p.stderr.read() for p in procs if p.poll() is not None]
                time.sleep(0.005)
            (sync / f"go-{r}").touch()
        results = [finish(p) for p in procs]
        (sync / "stop").touch()
        counts = finish(janitor)
    finally:
        (sync / "stop").touch()
    for r in range(count):
        got = [res[r] for res in results]
        assert all(g["failures"] == [] for g in got), [f for g in got for f in g["failures"]][0]
        assert sum(g["compiles"] + g["hits"] for g in got) == n * len(variants) * (1 + reads)
        assert sum(g["compiles"] for g in got) >= len(variants)
        for v in map(str, variants):  # one whole group per kernel, byte-identical in every process
            assert len({d for g in got for d in g["groups"][v]}) == 1, (r, v, got)
        assert got[0]["groups"]["0"] != got[0]["groups"]["1"]
    churn = sum(res[r]["compiles"] for res in results for r in range(count))
    assert all(counts[a] > 0 for a in ("remove", "unlink", "rename", "run-root", "plant")), counts
    assert not cli or (counts["clear"] > 0 and counts["prune"] > 0), counts
    print(f"janitor {counts}; compiles {churn} (at least {count * len(variants)})")


def test_threads_compile_each_kernel_once(tstore: kcache.Store) -> None:
    import threading

    counter = triton_worker.Counter()
    triton.knobs.compilation.listener = counter
    cubins: list[tuple[int, bytes]] = []

    def run(variant: int) -> None:
        k = triton.compile(triton_worker.source(variant), target=triton_worker.TARGET)
        cubins.append((variant, k.asm["cubin"]))

    try:
        threads = [threading.Thread(target=run, args=(v,)) for v in (4, 5) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        triton.knobs.compilation.listener = None
    assert (counter.compiles, counter.hits) == (2, 6) and len(cubins) == 8
    assert all(c == next(b for v2, b in cubins if v2 == v) for v, c in cubins)


def test_entries_and_files_removed_underneath_are_misses_never_failures(tstore: kcache.Store) -> None:
    # Threads compile two kernels round after round while a janitor removes every
    # entry (what `kcache clear`, eviction or another host's prune does), and
    # between rounds this process's own directories are removed (a cleaner):
    # no compile fails, every cubin is the same.
    import threading

    reference = {v: triton.compile(triton_worker.source(v), target=triton_worker.TARGET).asm["cubin"]
                 for v in (0, 1)}
    stop = threading.Event()
    failures: list[str] = []
    wrong: list[int] = []

    def janitor() -> None:
        while not stop.is_set():
            for e in tstore.list():
                tstore.remove(e.key)
            stop.wait(0.02)

    def remove_run_dirs() -> None:
        for run in (kcache._triton_files.run, kcache._triton_files.run_memory):
            if run.path:
                shutil.rmtree(run.path, ignore_errors=True)

    between_rounds = threading.Barrier(3, action=remove_run_dirs, timeout=300)

    def compiler() -> None:
        try:
            for _ in range(5):
                for v in (0, 1):
                    if triton.compile(triton_worker.source(v), target=triton_worker.TARGET).asm["cubin"] != reference[v]:
                        wrong.append(v)
                between_rounds.wait()
        except BaseException as e:  # noqa: BLE001 - reported below
            import traceback

            failures.append("".join(traceback.format_exception(e)))
            between_rounds.abort()

    counter = triton_worker.Counter()
    triton.knobs.compilation.listener = counter
    j = threading.Thread(target=janitor)
    threads = [threading.Thread(target=compiler) for _ in range(3)]
    try:
        j.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        stop.set()
        j.join(60)
        triton.knobs.compilation.listener = None
    assert wrong == [] and failures == [], failures[0]
    # The removals made misses; threads missing together still compiled once each time.
    assert counter.compiles + counter.hits == 30 and 1 <= counter.compiles < 30, (counter.compiles, counter.hits)


def test_killed_owner_a_waiter_takes_over(tmp_path: Path, warm_memo, xdg: Path) -> None:
    env = {"KCACHE_DIR": str(tmp_path / "cache"), "XDG_RUNTIME_DIR": str(xdg)}
    warm_memo(tmp_path / "cache")
    held = tmp_path / "held"
    owner = worker(["compile", "3", "--hold", str(held)], env)
    deadline = time.monotonic() + 120
    while not held.exists() and owner.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.exists(), owner.stderr.read() if owner.poll() is not None else "owner never took the key"
    run = xdg / "kcache-triton"  # the owner's staged files, in its private memory directory
    assert [d.name.split("-")[1] for d in run.iterdir()] == [str(owner.pid)]
    waiter = worker(["compile", "3"], env)
    time.sleep(0.3)  # the waiter is waiting (or still starting): either way it must not hit
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache")) as s:
        assert s.list() == []  # nothing partial is visible while the owner holds the key
    owner.send_signal(signal.SIGKILL)
    owner.communicate()
    r = finish(waiter)
    assert (r["compiles"], r["hits"]) == (1, 0)
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache")) as s:
        assert [e.kind for e in s.list()] == [kcache.triton.GROUP_KIND]
    # The dead owner's files were swept by the waiter when it made its own directory.
    assert [d.name.split("-")[1] for d in run.iterdir()] == []  # (the waiter removed its own at exit)
    r2 = finish(worker(["compile", "3"], env))
    assert (r2["compiles"], r2["hits"]) == (0, 1)


def test_a_compile_that_raised_gives_its_key_up(tstore: kcache.Store) -> None:
    # Triton drops the manager when compile() raises between get_group and
    # put_group: the key is given up then, so the next miss compiles at once
    # rather than waiting for the 600 s bound.
    import threading

    m = kcache.triton.KCacheManager
    holder = m("FAILKEY")
    assert holder.get_group("k.json") is None  # holds the key
    del holder
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(m("FAILKEY").get_group("k.json")), daemon=True)
    t.start()
    t.join(60)  # bounded, not hung: without the give-up it would wait 600 s
    assert not t.is_alive() and got == [None]


def test_two_writers_of_one_key_every_reader_sees_one_whole_group(tmp_path: Path) -> None:
    env = {"KCACHE_DIR": str(tmp_path / "cache")}
    keys = ",".join(f"RACEKEY{i}" for i in range(30))
    readers = [worker(["read", keys], env) for _ in range(2)]
    writers = [worker(["write", tag, keys], env) for tag in ("A", "B")]
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err[-3000:]
    for r in readers:
        out, err = r.communicate(timeout=120)
        assert r.returncode == 0, err[-3000:]
        seen = json.loads(out.strip().splitlines()[-1])
        assert len(seen) == 30 and all(len(tags) == 1 for tags in seen), seen


# ---- the cap, the command, the team tier --------------------------------------------------------


def test_cap_holds_and_the_command_sees_triton_entries(tmp_path: Path) -> None:
    cap = 96 * 1024  # groups of 25-31 KiB: about three of the five fit
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache", put="sync", max_size=cap))
    kcache.triton.install(store=s)
    try:
        r = compile_counted([0, 1, 2, 3, 4])
        assert r["compiles"] == 5
        st = s.stats()
        assert 0 < st["size_bytes"] <= cap and st["evictions"] >= 1 and st["entries"] < 5, st
    finally:
        kcache.triton.uninstall()
        s.close()
    cli = kcache_cli()
    if cli is None:
        return
    env = {**os.environ, "KCACHE_DIR": str(tmp_path / "cache")}
    ls = subprocess.run([cli, "ls", "--json"], env=env, capture_output=True, text=True)
    assert ls.returncode == 0, ls.stderr
    listed = json.loads(ls.stdout)
    assert len(listed) == st["entries"] and all(e["kind"] == kcache.triton.GROUP_KIND for e in listed)
    verify = subprocess.run([cli, "verify", "--json"], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    v = json.loads(verify.stdout)
    assert (v["entries_ok"], v["entries_bad"], v["orphans"]) == (len(listed), 0, 0)
    # 48K less the cache's metadata (about 14 KiB, counted under the cap) holds one group.
    prune = subprocess.run([cli, "prune", "--max-size", "48K"], env=env, capture_output=True, text=True)
    assert prune.returncode == 0, prune.stderr
    after = json.loads(subprocess.run([cli, "ls", "--json"], env=env, capture_output=True, text=True).stdout)
    assert len(listed) >= 2 and len(after) == 1 and after[0]["kind"] == kcache.triton.GROUP_KIND


def test_hosts_compile_once_and_a_new_host_hits_through_redis(tmp_path: Path, redis_url: str, warm_memo) -> None:
    # Three "hosts" (each its own cache directory, the one Redis remote) miss on
    # the same cold kernel at the same moment: the remote lease lets one compile.
    go = tmp_path / "go"
    for name in ("host0", "host1", "host2", "hostB"):
        warm_memo(tmp_path / name)
    procs = [worker(["compile", "0", "--go", str(go)], {"KCACHE_DIR": str(tmp_path / f"host{i}"),
                                                      "KCACHE_REMOTE": redis_url}) for i in range(3)]
    time.sleep(0.5)  # let them import Triton; the herd starts on the file, not on this sleep
    go.touch()
    results = [finish(p) for p in procs]
    assert sum(r["compiles"] for r in results) == 1 and all(r["cubins"] == results[0]["cubins"] for r in results)
    # A new host with an empty local cache hits the remote.
    b = finish(worker(["compile", "0"], {"KCACHE_DIR": str(tmp_path / "hostB"), "KCACHE_REMOTE": redis_url}))
    assert (b["compiles"], b["hits"]) == (0, 1) and b["cubins"] == results[0]["cubins"]
    # The host fed by the remote counts its hit as served, from the remote.
    req = triton_requests(tmp_path / "hostB")
    assert (req["total"], req["served"]["remote"], req["compiled"]) == (1, 1, 0), req


@pytest.mark.parametrize("remote", ["redis_cluster_url", "http_url"])
def test_a_new_host_hits_through_a_redis_cluster_or_http_remote(tmp_path: Path, warm_memo, remote: str,
                                                                  request: pytest.FixtureRequest) -> None:
    # The team tier with Triton over a real Redis Cluster (three masters) and a real nginx
    # WebDAV server. On the cluster, two hosts that miss at the same moment compile once
    # (its lease); HTTP has no lease (docs/configuration.md), so one host compiles alone.
    # Then a new host with an empty cache directory hits through the remote, and gets the
    # same whole group, byte for byte.
    url = request.getfixturevalue(remote)
    hosts = 2 if remote == "redis_cluster_url" else 1
    for name in [f"host{i}" for i in range(hosts)] + ["hostB"]:
        warm_memo(tmp_path / name)
    go = tmp_path / "go"
    procs = [worker(["compile", "1", "--go", str(go)], {"KCACHE_DIR": str(tmp_path / f"host{i}"),
                                                      "KCACHE_REMOTE": url}) for i in range(hosts)]
    time.sleep(0.5)  # let them import Triton; the herd starts on the file, not on this sleep
    go.touch()
    results = [finish(p) for p in procs]  # each has published its uploads before it exited
    assert sum(r["compiles"] for r in results) == 1 and all(r["groups"] == results[0]["groups"] for r in results)
    b = finish(worker(["compile", "1"], {"KCACHE_DIR": str(tmp_path / "hostB"), "KCACHE_REMOTE": url}))
    assert (b["compiles"], b["hits"]) == (0, 1), b
    assert b["groups"] == results[0]["groups"] and b["cubins"] == results[0]["cubins"]
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "hostB")) as s:  # copied in, verified
        assert [e.kind for e in s.list()] == [kcache.triton.GROUP_KIND]


def test_environment_route_without_install(tmp_path: Path) -> None:
    env = {"KCACHE_DIR": str(tmp_path / "cache"), "TRITON_CACHE_MANAGER": "kcache.triton:KCacheManager",
           "TRITON_CACHE_DIR": str(tmp_path / "triton-own")}
    r = finish(worker(["compile", "0", "--env-route"], env))
    assert r["compiles"] == 1
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache")) as s:
        assert [e.kind for e in s.list()] == [kcache.triton.GROUP_KIND]
    assert not (tmp_path / "triton-own").exists() or not any((tmp_path / "triton-own").iterdir())


# ---- warm starts: the memoized triton_key() -----------------------------------------------------


def test_memoized_key_follows_every_file_it_covers(tmp_path: Path) -> None:
    from kcache import _triton_key

    pkg = tmp_path / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("a = 1\n")
    (pkg / "sub" / "b.py").write_text("b = 2\n")
    code = (f"import hashlib, os\nROOT = {str(pkg)!r}\n"
            "def key():\n    out = []\n"
            "    for rel in sorted(os.listdir(ROOT)) + ['sub/' + n for n in sorted(os.listdir(ROOT + '/sub'))]:\n"
            "        p = os.path.join(ROOT, rel)\n"
            "        if os.path.isfile(p):\n"
            "            with open(p, 'rb') as f:\n                out.append(hashlib.sha256(f.read()).hexdigest())\n"
            "    return '-'.join(out)\n")
    mod_path = tmp_path / "fake_key.py"
    mod_path.write_text(code)
    sys.path.insert(0, str(tmp_path))
    try:
        import fake_key
    finally:
        sys.path.remove(str(tmp_path))
    memo = str(tmp_path / "memo.json")

    def check(expect_memo: bool) -> None:
        value, from_memo = _triton_key.memoized(fake_key.key, fake_key, memo)
        assert value == fake_key.key() and from_memo == expect_memo

    check(False)
    check(True)
    os.utime(pkg / "a.py", ns=(1, 1))  # touch (mtime back in time)
    check(False)
    check(True)
    (pkg / "sub" / "b.py").write_text("b = 3\n")  # edit
    check(False)
    (pkg / "c.py").write_text("c\n")  # a new file in a covered directory
    check(False)
    check(True)
    (pkg / "a.tmp").write_text("a = 1\n")
    os.replace(pkg / "a.tmp", pkg / "a.py")  # replaced by a file of the same content
    check(False)
    check(True)
    assert "open" not in fake_key.__dict__


def test_memoized_triton_key_equals_tritons_and_is_reused(tmp_path: Path) -> None:
    code = ("import hashlib, kcache.triton; kcache.triton.install()\n"
            "import triton.runtime.cache as tc, triton.runtime.autotuner as ta\n"
            "assert ta.triton_key is tc.triton_key\n"
            "from triton.compiler.compiler import make_backend\n"
            "from triton.backends.compiler import GPUTarget\n"
            "make_backend(GPUTarget('cuda', 90, 32)).hash()  # asks ptxas --version\n"
            "print(hashlib.sha256(tc.triton_key().encode()).hexdigest())\n")
    env = {"KCACHE_DIR": str(tmp_path / "cache")}
    real = run_python("import hashlib, triton.runtime.cache as tc; "
                      "print(hashlib.sha256(tc.triton_key().encode()).hexdigest())", env)
    assert real.returncode == 0, real.stderr
    first = run_python(code, env)
    assert first.returncode == 0, first.stderr
    (memo,) = (tmp_path / "cache" / "v1" / "triton").glob("key-*.json")
    written = memo.stat()
    second = run_python(code, env)
    assert second.returncode == 0, second.stderr
    assert first.stdout.strip() == second.stdout.strip() == real.stdout.strip()
    again = memo.stat()  # the second process read the memo: it did not write it again
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    covered = json.loads(memo.read_text())["files"]
    assert any("/_C/libtriton" in p for p, *_ in covered)
    # ptxas --version (Triton's backend asks it twice per process) is remembered beside it.
    tools = json.loads((memo.parent / "tools.json").read_text())["tools"]
    asked = sorted(name.split("\0")[1] for name in tools if "/nvidia/bin/ptxas" in name.split("\0")[0])
    assert asked == ["0", "1"]  # get_ptxas_version, and NvidiaTool.from_path (stderr merged)


def test_tool_versions_are_remembered_while_the_tool_is_unchanged(tmp_path: Path) -> None:
    import subprocess as real

    from kcache import _triton_key

    tool = tmp_path / "ptxas"
    runs = tmp_path / "runs"
    tool.write_text(f"#!/bin/sh\necho x >> {runs}\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    tool.chmod(0o755)
    sub = _triton_key.ToolVersions(real, str(tmp_path / "tools.json"))

    def ask() -> bytes:
        return sub.check_output([str(tool), "--version"], stderr=real.STDOUT)  # type: ignore[no-any-return]

    first = ask()
    assert b"release 12.8" in first and ask() == first and runs.read_text().count("x") == 1
    os.utime(tool, ns=(1, 1))  # touched: asked again
    assert ask() == first and runs.read_text().count("x") == 2
    assert sub.check_output([str(tool), "--help"]) and runs.read_text().count("x") == 3  # other calls pass through
    assert sub.STDOUT == real.STDOUT and sub.CalledProcessError is real.CalledProcessError

