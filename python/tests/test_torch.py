"""kcache.torch: torch.compile's caches on kcache, with real torch from PyPI (the test extra) on
CPU Inductor, in real processes (torch_worker.py): each "host" has its own
TORCHINDUCTOR_CACHE_DIR and TMPDIR (where Inductor keeps its precompiled headers), so nothing
Inductor wrote itself is shared; what a host gets from another comes through kcache. The team
remote is a real redis-server.

Most runs compile ``a @ b`` (forward and backward: an FX graph each way and an AOTAutograd
entry, no C++ kernel: quick); one compiles a small MLP whose kernels Inductor builds with the host
compiler. Skips when torch cannot be imported and KCACHE_REQUIRE_TOOLKIT is unset (CI sets it).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kcache

from conftest import kcache_cli, run_python

if importlib.util.find_spec("torch") is None:  # (not imported here: the workers import it)
    if os.environ.get("KCACHE_REQUIRE_TOOLKIT"):
        raise ImportError("KCACHE_REQUIRE_TOOLKIT is set but torch is not installed")
    pytest.skip("torch is not installed; scripts/python-venv.sh test installs it", allow_module_level=True)

WORKER = str(Path(__file__).with_name("torch_worker.py"))
GRAPH_KINDS = ("torch-fx", "torch-aot")


def host(tmp_path: Path, name: str, kcache_dir: Path | None = None, **env: str) -> dict[str, str]:
    """The environment of one "host": its own Inductor directory and TMPDIR, a kcache directory."""
    root = tmp_path / name
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    out = {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TMPDIR": str(root / "tmp"),
           "KCACHE_DIR": str(kcache_dir or root / "kcache"), "TORCHINDUCTOR_VEC_ISA_OK": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    out.update(env)
    return out


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "KCACHE_TORCH"))}
    full.update(env)
    return subprocess.Popen([sys.executable, WORKER, *args], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err[-4000:]}"
    result = json.loads(out.strip().splitlines()[-1])
    result["stderr"] = err
    return result


def run(env: dict[str, str], *args: str) -> dict:
    return finish(start(env, *args))


def kcache_warnings(r: dict) -> list[str]:
    """The lines kcache printed (C++ "kcache: warning:") and the RuntimeWarnings of kcache.torch."""
    return [line for line in r["stderr"].splitlines() if line.startswith("kcache: warning:")] + r["warnings"]


def entries(kcache_dir: Path) -> dict[str, list[kcache.Entry]]:
    with kcache.open_store(kcache.Config.load(cache_dir=kcache_dir)) as s:
        out: dict[str, list[kcache.Entry]] = {}
        for e in s.list():
            out.setdefault(e.kind, []).append(e)
        return out


def payload_path(kcache_dir: Path, key: kcache.Key) -> Path:
    return kcache_dir / "v1" / "entries" / key.hex[:2] / key.hex


def evil_pickle(marker: Path) -> bytes:
    """Inductor's remote value around a valid pickle that, if ever unpickled, makes ``marker``."""

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.mkdir, (str(marker),))

    data = base64.b64encode(pickle.dumps(Evil())).decode("ascii")
    return json.dumps({"data": data, "time_taken_ms": 1}).encode("ascii")


# ---- the module ---------------------------------------------------------------------------------


def test_import_without_torch_explains() -> None:
    r = run_python("import sys; sys.modules['torch'] = None\n"
                   "try:\n    import kcache.torch\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    assert r.returncode == 0, r.stderr
    assert "ImportError: kcache.torch needs PyTorch" in r.stdout and "pip install torch" in r.stdout


def test_an_untested_torch_or_moved_internals_warn_once_and_change_nothing(tmp_path: Path) -> None:
    code = (
        "import warnings, torch, torch._inductor.config as c, torch._inductor.remote_cache as rc\n"
        "import kcache.torch\n"
        "real = torch.__version__\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    torch.__version__ = '2.99.0'\n"
        "    a = kcache.torch.install(); b = kcache.torch.install()\n"
        "    torch.__version__ = real\n"
        "    del rc.RemoteCache.backend_override_cls\n"
        "    d = kcache.torch.install()\n"
        "print(a, b, d, c.fx_graph_cache, c.fx_graph_remote_cache, kcache.torch.installed())\n"
        "for x in w: print('W', x.message)\n"
    )
    r = run_python(code, {"KCACHE_DIR": str(tmp_path / "k"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "i"),
                          "TORCHINDUCTOR_COMPILE_THREADS": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "False False False True None []", r.stdout
    assert not (tmp_path / "k").exists()  # nothing opened
    warned = [x for x in lines[1:] if x.startswith("W kcache.torch")]
    assert len(warned) == 2, r.stdout  # one for the version (not two), one for the internals
    assert "torch 2.99.0 is not a version kcache.torch is tested with" in warned[0]
    assert "backend_override_cls is missing" in warned[1] and "runs without kcache" in warned[1]


def test_internals_found_moved_when_inductor_loads_warn_once_and_change_nothing(tmp_path: Path) -> None:
    # install() before Inductor loads (as KCACHE_TORCH=1 does it): the seam is checked when
    # Inductor's remote cache module loads; gone there, one warning, the switches are restored
    # and torch.compile runs as without kcache.
    code = (
        "import sys, warnings, torch, kcache._autoload as a, kcache.torch\n"
        "assert 'torch._inductor' not in sys.modules\n"
        "a.after_import('torch._inductor.remote_cache', lambda: delattr(sys.modules['torch._inductor.remote_cache']"
        ".RemoteCache, 'backend_override_cls'))\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    print(kcache.torch.install())\n"
        "    import torch._inductor.config as c\n"
        "    c.compile_threads = 1\n"
        "    print(torch.compile(lambda a: a @ a.T)(torch.ones(2, 3)).tolist())\n"
        "print(c.fx_graph_cache, c.fx_graph_remote_cache, kcache.torch.installed(), kcache.torch.stats())\n"
        "for x in w: print('W', x.message)\n"
    )
    r = run_python(code, {"KCACHE_DIR": str(tmp_path / "k"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "i"),
                          "TORCHINDUCTOR_COMPILE_THREADS": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["True", "[[3.0, 3.0], [3.0, 3.0]]", "True None [] {}"], r.stdout
    warned = [x for x in lines[3:] if x.startswith("W kcache")]
    assert len(warned) == 1 and "backend_override_cls is missing" in warned[0], r.stdout
    assert (tmp_path / "i" / "fxgraph").is_dir()  # Inductor's own FX graph cache
    assert entries(tmp_path / "k") == {}


# ---- hosts share every graph --------------------------------------------------------------------


def test_a_second_host_compiles_nothing(tmp_path: Path) -> None:
    # Host A compiles a small MLP (forward and backward; its C++ kernels and Inductor's ISA
    # checks by the host compiler) with kcache.torch.install(); host B, a new Inductor directory
    # and TMPDIR over the same kcache directory, turned on by KCACHE_TORCH=1 alone: every graph,
    # C++ build and ISA check is a hit, nothing is lowered or compiled, the results are the same
    # bit for bit.
    store = tmp_path / "kcache"
    isa = {"TORCHINDUCTOR_VEC_ISA_OK": ""}  # Inductor checks each vector ISA with the host compiler
    a = run(host(tmp_path, "a", store, **isa), "--model", "mlp")
    assert a["installed"] is True and a["lowerings"] == 2 and a["cpp_builds"] >= 3, a
    assert (a["fx_miss"], a["aot_miss"]) == (2, 1)
    b = run(host(tmp_path, "b", store, KCACHE_TORCH="1", **isa), "--model", "mlp", "--activate", "env")
    assert b["installed"] is True, b
    assert (b["lowerings"], b["cpp_builds"], b["fx_hit"], b["aot_hit"], b["fx_miss"]) == (0, 0, 2, 1, 0), b
    assert b["digest"] == a["digest"]
    ks = b["kstats"]
    assert ks["fx-graph"]["hit"] == 2 and ks["aot-autograd"]["hit"] == 1, ks
    assert ks["cpp"]["hit"] == a["kstats"]["cpp"]["put"] >= 3 and ks["isa"]["hit"] == a["kstats"]["isa"]["put"] >= 1
    assert kcache_warnings(a) == [] and kcache_warnings(b) == []
    # `kcache stats` counts Inductor's requests (route "torch": graphs, C++ builds, ISA checks):
    # what A published as compiled, what B was served as served, from the disk tier.
    with kcache.open_store(kcache.Config.load(cache_dir=store)) as s:
        req = s.stats()["requests"]["routes"]["torch"]
    parts = ("fx-graph", "aot-autograd", "cpp", "isa")
    compiled, served = sum(a["kstats"][c]["put"] for c in parts), sum(ks[c]["hit"] for c in parts)
    assert (req["compiled"], req["served"]["disk"], req["served"]["total"], req["failed"]) == (
        compiled, served, served, 0), req
    # Inductor's own directories hold no graph: kcache's entries are the cache.
    for name in ("a", "b"):
        inductor = tmp_path / name / "inductor"
        assert not (inductor / "fxgraph").exists() and not (inductor / "aotautograd").exists()
    kinds = {k: len(v) for k, v in entries(store).items()}
    assert kinds["torch-fx"] == 2 and kinds["torch-aot"] == 1 and kinds["torch-cpp"] >= 3, kinds
    cli = kcache_cli()
    if cli is None:
        return
    env = {**os.environ, "KCACHE_DIR": str(store)}
    listed = json.loads(subprocess.run([cli, "ls", "--json"], env=env, capture_output=True, text=True).stdout)
    assert {e["kind"] for e in listed} == {"torch-fx", "torch-aot", "torch-cpp", "torch-isa"}
    verify = subprocess.run([cli, "verify", "--json"], env=env, capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    v = json.loads(verify.stdout)
    assert (v["entries_ok"], v["entries_bad"]) == (len(listed), 0)


def test_hosts_compile_once_and_a_new_host_hits_through_redis(tmp_path: Path, redis_url: str) -> None:
    # Two hosts (their own kcache directories, one Redis team remote) compile the same graphs at
    # the same moment: one compiles (the remote lease), the other waits for its entries. A new
    # host then gets everything from the remote.
    go = tmp_path / "go"
    procs = [start(host(tmp_path, f"h{i}", KCACHE_REMOTE=redis_url), "--go", str(go)) for i in range(2)]
    time.sleep(1)  # let them import torch; the herd starts on the file, not on this sleep
    go.touch()
    hs = [finish(p) for p in procs]
    assert sum(h["lowerings"] for h in hs) == 2, [h["lowerings"] for h in hs]
    assert hs[0]["digest"] == hs[1]["digest"]
    served = [h["kstats"]["fx-graph"]["hit_remote"] + h["kstats"]["fx-graph"]["hit_after_wait"] for h in hs]
    assert sorted(served) == [0, 2], [h["kstats"] for h in hs]  # the other host's graphs, not its own
    c = run(host(tmp_path, "new", KCACHE_REMOTE=redis_url))
    assert (c["lowerings"], c["fx_hit"], c["aot_hit"]) == (0, 2, 1), c
    assert c["kstats"]["fx-graph"]["hit_remote"] == 2 and c["kstats"]["aot-autograd"]["hit_remote"] == 1
    assert c["digest"] == hs[0]["digest"]
    got = entries(tmp_path / "new" / "kcache")  # copied in from the remote, verified
    assert len(got["torch-fx"]) == 2 and len(got["torch-aot"]) == 1


def test_four_processes_compile_each_graph_once(tmp_path: Path) -> None:
    store = tmp_path / "kcache"
    go = tmp_path / "go"
    procs = [start(host(tmp_path, f"p{i}", store), "--go", str(go)) for i in range(4)]
    time.sleep(1)
    go.touch()
    rs = [finish(p) for p in procs]
    assert sum(r["lowerings"] for r in rs) == 2, [r["lowerings"] for r in rs]  # one forward, one backward
    assert len({r["digest"] for r in rs}) == 1
    kinds = {k: len(v) for k, v in entries(store).items()}
    assert (kinds["torch-fx"], kinds["torch-aot"]) == (2, 1)


def test_the_owner_killed_mid_compile_a_waiter_takes_over(tmp_path: Path) -> None:
    store = tmp_path / "kcache"
    stall = tmp_path / "stall"
    owner = start(host(tmp_path, "owner", store), "--stall", str(stall))
    deadline = time.monotonic() + 300
    while not stall.exists():
        assert owner.poll() is None and time.monotonic() < deadline, owner.communicate()[1][-3000:]
        time.sleep(0.05)
    waiter = start(host(tmp_path, "waiter", store))
    time.sleep(3)  # the waiter imports torch and waits on the owner's key
    assert waiter.poll() is None
    t0 = time.monotonic()
    os.kill(owner.pid, signal.SIGKILL)
    owner.communicate()
    w = finish(waiter)
    assert w["lowerings"] == 2 and time.monotonic() - t0 < 50, w  # long before the owner's 60 s stall ends
    assert (len(entries(store)["torch-fx"]), len(entries(store)["torch-aot"])) == (2, 1)


# ---- damaged, forged and unsigned entries ---------------------------------------------------------


def test_damaged_and_forged_entries_are_misses_never_unpickled(tmp_path: Path) -> None:
    # A flipped byte (one graph), a truncated payload (the other) and a forged one (a valid
    # pickle that would make a directory if unpickled, in place of the AOTAutograd entry): each
    # is a miss (one warning for the process), the graphs are compiled again, the results are right.
    store = tmp_path / "kcache"
    a = run(host(tmp_path, "a", store))
    got = entries(store)
    (fx0, fx1), (aot,) = got["torch-fx"], got["torch-aot"]
    p = payload_path(store, fx0.key)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    p = payload_path(store, fx1.key)
    p.write_bytes(p.read_bytes()[: fx1.payload_size // 2])
    marker = tmp_path / "unpickled"
    payload_path(store, aot.key).write_bytes(evil_pickle(marker))
    b = run(host(tmp_path, "b", store))
    assert not marker.exists()
    assert (b["lowerings"], b["fx_hit"], b["aot_hit"]) == (2, 0, 0), b
    assert b["digest"] == a["digest"]
    warned = kcache_warnings(b)  # one line per process, however many entries were damaged
    assert len(warned) == 1 and "was damaged" in warned[0], warned
    with kcache.open_store(kcache.Config.load(cache_dir=store)) as s:  # compiled again, stored again, whole
        assert s.stats()["corrupt"] == 3
        for e in (fx0, fx1, aot):
            assert s.get(e.key).payload[:1] == b"{"


def test_with_a_team_key_unsigned_remote_entries_are_refused(tmp_path: Path, redis_url: str) -> None:
    # Someone who can write to the Redis server but holds no team key replaces every graph of
    # the team with a forged one (valid entries of the right keys, unsigned). A keyless reader
    # would take them; a host with the team key refuses them (one warning), compiles, and never
    # unpickles a byte of them.
    key_file = tmp_path / "team.key"
    key_file.write_text(os.urandom(32).hex() + "\n")
    key_file.chmod(0o600)
    team = {"KCACHE_REMOTE": redis_url, "KCACHE_REMOTE_KEY_FILE": str(key_file)}
    a = run(host(tmp_path, "a", **team))
    marker = tmp_path / "unpickled"
    evil = evil_pickle(marker)
    signed = entries(tmp_path / "a" / "kcache")
    keys = [e.key for kind in GRAPH_KINDS for e in signed[kind]]
    assert len(keys) == 3
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "a" / "kcache")) as s:
        records = {k: s.get(k) for k in keys}
    rogue_cfg = kcache.Config.load(cache_dir=tmp_path / "rogue", remote=redis_url, put="sync")
    with kcache.open_store(rogue_cfg) as rogue:
        for k, real in records.items():
            fields = [(f["name"], f["value"]) for f in real.passport["key_record"]["fields"]]
            forged = kcache._kcache._record_artifact("torch", fields, real.kind, evil, "torch", "2.15.0", "", {})
            assert forged.key == k
            rogue.remove(k, remote=True)
            rogue.put(forged)
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "keyless", remote=redis_url)) as keyless:
        assert all(keyless.get(k).payload == evil for k in keys)  # the forgery is on the server
    v = run(host(tmp_path, "v", **team))
    assert not marker.exists()
    assert (v["lowerings"], v["fx_hit"], v["aot_hit"]) == (2, 0, 0), v
    assert v["digest"] == a["digest"]
    warned = kcache_warnings(v)
    assert len(warned) == 1 and "holds a bad object" in warned[0] and "unsigned" in warned[0], warned


# ---- keys ----------------------------------------------------------------------------------------


def test_a_change_that_changes_the_graph_is_a_miss_and_pgo_profiles_round_trip(tmp_path: Path) -> None:
    # A forward graph compiled once; then, in a new process, the same graph hits, and a changed
    # shape, dtype, Inductor flag or recorded torch version each misses. With a job id, Dynamo's
    # PGO profile of the first process is read back by the second, which replaces it.
    store = tmp_path / "kcache"
    job = {"TORCH_COMPILE_JOB_ID": "kcache-test-job"}
    first = run(host(tmp_path, "a", store, **job), "--model", "none", "--variants", "base")
    assert first["variants"]["base"]["lowerings"] == 1
    assert first["kstats"]["pgo"]["put"] >= 1, first["kstats"]
    r = run(host(tmp_path, "b", store, **job), "--model", "none", "--variants", "base,shape,dtype,flag,version")
    v = r["variants"]
    assert (v["base"]["lowerings"], v["base"]["fx_hit"]) == (0, 1), v
    assert v["base"]["sum"] == first["variants"]["base"]["sum"]
    for change in ("shape", "dtype", "flag", "version"):
        assert (v[change]["lowerings"], v[change]["fx_hit"]) == (1, 0), (change, v)
    pgo = r["kstats"]["pgo"]  # read again after each torch._dynamo.reset(); the changed torch version: a new key
    assert pgo["hit"] >= 1 and pgo["replaced"] >= 1, pgo
    assert len(entries(store)["torch-pgo"]) == 2


# ---- in this process ------------------------------------------------------------------------------


def test_install_puts_each_cache_on_kcache_and_uninstall_gives_it_back(tmp_path: Path) -> None:
    import torch._dynamo.config as dc
    import torch._functorch.config as fc
    import torch._inductor.config as ic
    from torch._inductor import remote_cache

    import kcache.torch

    def switches() -> tuple:
        return (ic.fx_graph_cache, ic.fx_graph_remote_cache, fc.enable_autograd_cache, fc.enable_remote_autograd_cache,
                ic.autotune_remote_cache, dc.automatic_dynamic_local_pgo, dc.automatic_dynamic_remote_pgo,
                ic.cpp_cache_precompile_headers, remote_cache.RemoteFxGraphCache.backend_override_cls)

    before = switches()
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "kcache", put="sync"))
    try:
        assert kcache.torch.install(store=s) is True
        assert kcache.torch.installed() == ["fx-graph", "aot-autograd", "autotune", "pgo", "cpp"]  # no GPU: no bundled
        assert switches()[:8] == (False, True, False, True, True, False, True, False)
        # A mutable cache (PGO profiles): a new value replaces the entry; an immutable one
        # (FX graphs): the first value stays.
        pgo = remote_cache.RemoteDynamoPGOCache("dynamo-pgo")
        pgo.put("job:None:", {"data": "one"})
        pgo.put("job:None:", {"data": "two"})
        pgo.put("job:None:", {"data": "two"})
        fx = remote_cache.RemoteFxGraphCache("fx-graph-v1")
        fx.put("fgraph", {"data": "first", "time_taken_ms": 5})
        fx.put("fgraph", {"data": "second", "time_taken_ms": 5})
        with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "kcache")) as other:  # another process's view
            got = {e.kind: other.get(e.key) for e in other.list()}
        assert json.loads(got["torch-pgo"].payload) == {"data": "two"}
        assert json.loads(got["torch-fx"].payload) == {"data": "first", "time_taken_ms": 5}
        assert pgo.get("job:None:") == {"data": "two"} and fx.get("fgraph")["data"] == "first"
        st = kcache.torch.stats()
        assert (st["pgo"]["put"], st["pgo"]["replaced"], st["pgo"]["put_unchanged"], st["pgo"]["hit"]) == (2, 1, 1, 1)
        passport = got["torch-fx"].passport
        fields = dict((f["name"], f["value"]) for f in passport["key_record"]["fields"])
        assert passport["key_record"]["domain"] == "torch" and passport["producer"]["name"] == "torch"
        assert fields["cache"] == "fx-graph" and fields["key"] == "pt2:fx-graph-v1::fgraph:c1"
        assert fields["torch_version"] == torch_version() and {"python", "cpu"} <= set(fields)
        assert passport["labels"]["torch.cache"] == "fx-graph"
    finally:
        kcache.torch.uninstall()
        s.close()
    assert switches() == before and kcache.torch.installed() == []


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def test_triton_groups_keep_tritons_layout_for_inductor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With kcache.triton under Inductor, every group kcache serves or publishes is also laid out
    # in $TRITON_CACHE_DIR/<key>/ as Triton's FileCacheManager writes it: Inductor's kernel
    # bundling and static launcher read it there. (A real Triton compile for an explicit
    # target; Inductor itself needs a GPU for Triton: scripts/device-check.sh.)
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    from triton.runtime.cache import FileCacheManager

    import kcache.triton
    import triton_worker
    from kcache.torch import _common, _triton

    tdir = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tdir))
    monkeypatch.setattr(_common.settings, "on", True)
    s = kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "kcache", put="sync"))
    kcache.triton.install(store=s)
    monkeypatch.setattr(kcache.triton, "on_group", _triton.on_group)
    try:
        src = triton_worker.salted_source(0, int.from_bytes(os.urandom(4), "little"))
        k = triton.compile(src, target=triton_worker.TARGET)  # a miss: compiled, published
        name = f"{k.name}.json"

        def laid_out() -> dict[str, str]:
            (d,) = [d for d in tdir.iterdir() if not d.name.startswith("tmp.")]  # one directory: Triton's key
            group = FileCacheManager(d.name).get_group(name)  # read by Triton's own manager
            assert group is not None and all(Path(p).parent == d for p in group.values()), group
            assert Path(group[f"{k.name}.cubin"]).read_bytes() == k.asm["cubin"]
            assert json.loads(Path(group[name]).read_text())["hash"] == k.hash
            return group

        first = laid_out()
        shutil.rmtree(tdir)
        kcache._triton_files.forget()
        k2 = triton.compile(src, target=triton_worker.TARGET)  # a hit (kcache's entry): laid out again
        assert k2.asm["cubin"] == k.asm["cubin"] and laid_out() == first
    finally:
        kcache.triton.uninstall()
        s.close()


def test_ranks_stay_apart_when_a_pass_bakes_the_rank_into_the_graph(tmp_path: Path) -> None:
    # Inductor's bucketing passes put dist.get_rank() into the code after its key was formed
    # (pytorch#188332): with one on, the rank is in kcache's key; without, ranks share entries.
    import torch.distributed as dist
    import torch._inductor.config as ic

    from kcache.torch import _common, _remote

    fx = _remote.CACHES[0]
    monkey = pytest.MonkeyPatch()
    monkey.setattr(_common.settings, "torch_version", torch_version())
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        shared, fields = fx.kkey("pt2:fx-graph-v1::fkey:c1")
        assert "rank" not in dict(fields)
        monkey.setattr(ic, "bucket_all_gathers_fx", "all")
        apart, fields = fx.kkey("pt2:fx-graph-v1::fkey:c1")
        assert dict(fields)["rank"] == "0/1" and apart != shared
        monkey.setattr(ic, "bucket_all_gathers_fx", "none")
        monkey.setattr(_common.settings, "per_rank", True)
        assert fx.kkey("pt2:fx-graph-v1::fkey:c1")[0] == apart
        monkey.setattr(_common.settings, "per_rank", False)
        monkey.setattr(ic, "bucket_all_gathers_fx", "all")
        assert fx.kkey("pt2:fx-graph-v1::fkey:c1")[0] == shared
    finally:
        monkey.undo()
        dist.destroy_process_group()
