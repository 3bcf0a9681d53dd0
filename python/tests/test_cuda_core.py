"""kcache.cuda_core against the real cuda-core / cuda-bindings and NVRTC (no GPU needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

cuda_core = pytest.importorskip("cuda.core")
from cuda.core import ObjectCode, Program, ProgramOptions  # noqa: E402
from cuda.core.utils import FileStreamProgramCache, ProgramCacheResource, make_program_cache_key  # noqa: E402

import kcache  # noqa: E402
import kcache.cuda_core as kcc  # noqa: E402
from conftest import SAXPY, TEMPLATED, run_python  # noqa: E402


def fresh(src: str) -> str:
    return src + "\n// " + os.urandom(8).hex() + "\n"


def test_program_cache_is_a_program_cache_resource(store: kcache.Store) -> None:
    assert isinstance(kcc.ProgramCache(store), ProgramCacheResource)


def test_program_compile_with_program_cache_is_byte_equal_and_hits(store: kcache.Store) -> None:
    src = fresh(SAXPY)
    options = ProgramOptions(arch="sm_90", std="c++17")
    uncached = Program(src, "c++", options).compile("cubin")
    cache = kcc.ProgramCache(store)
    cold = Program(src, "c++", options).compile("cubin", cache=cache)
    hits_before = store.stats()["hits"]
    warm = Program(src, "c++", options).compile("cubin", cache=cache)
    assert bytes(cold.code) == bytes(uncached.code) == bytes(warm.code)
    assert warm.code_type == "cubin" and warm.name == uncached.name
    assert store.stats()["hits"] == hits_before + 1
    assert len(cache) == 1
    ltoir = Program(src, "c++", ProgramOptions(arch="sm_90", link_time_optimization=True)).compile("ltoir", cache=cache)
    assert bytes(ltoir.code) == bytes(
        Program(src, "c++", ProgramOptions(arch="sm_90", link_time_optimization=True)).compile("ltoir").code)
    assert len(cache) == 2
    # The entries are kcache entries: verified, listed, counted.
    kinds = {e.kind for e in store.list()}
    assert kinds == {"cuda-core"}


def test_mapping_protocol(store: kcache.Store) -> None:
    cache = kcc.ProgramCache(store)
    with pytest.raises(KeyError):
        cache[b"missing"]
    assert cache.get(b"missing") is None and cache.get("missing", b"d") == b"d"
    cache[b"k1"] = b"one"
    cache["k1"] = b"one"  # str keys are their UTF-8 bytes
    assert cache[b"k1"] == b"one" and cache["k1"] == b"one"
    cache.update({b"k2": bytearray(b"two"), b"k3": memoryview(b"three")})
    assert len(cache) == 3
    obj = ObjectCode.from_cubin(b"\x7fELF-not-really", name="x")
    cache[b"k4"] = obj
    assert cache[b"k4"] == b"\x7fELF-not-really"
    del cache[b"k1"]
    with pytest.raises(KeyError):
        del cache[b"k1"]
    other = kcache.Artifact.from_bytes(b"not a cuda.core entry")
    store.put(other)
    cache.clear()
    assert len(cache) == 0
    assert store.get(other.key) is not None  # clear() leaves the rest of the cache alone
    with pytest.raises(TypeError):
        cache[1] = b"x"  # type: ignore[index]
    with pytest.raises(TypeError):
        cache[b"k"] = 42
    with kcc.ProgramCache(store) as c2:
        c2[b"k5"] = b"five"
    assert kcc.ProgramCache(store)[b"k5"] == b"five"


def test_a_flipped_byte_in_a_large_entry_is_a_miss_on_program_cache_get(tmp_path: Path) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "c", put="sync", memory_size=0)
    value = os.urandom(4 << 20)
    with kcache.open_store(cfg) as s:
        cache = kcc.ProgramCache(s)
        cache[b"big"] = value
        for _ in range(2):  # SHA-256, then the recorded fast check
            got = cache.get(b"big")
            assert type(got) is bytes and got == value
        [entry] = [e for e in s.list() if e.kind == kcc.ENTRY_KIND]
        key = str(entry.key)
        payload = tmp_path / "c" / "v1" / "entries" / key[:2] / key
        with open(payload, "r+b") as f:
            f.seek(1 << 20)
            f.write(bytes([value[1 << 20] ^ 0x01]))
        assert cache.get(b"big") is None
        with pytest.raises(KeyError):
            cache[b"big"]
        assert s.stats()["corrupt"] == 1
        assert not payload.exists()


def test_a_flipped_bit_is_never_returned(tmp_path: Path) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "c", put="sync", memory_size=0, verify="full")
    src = fresh(SAXPY)
    options = ProgramOptions(arch="sm_90")
    with kcache.open_store(cfg) as s:
        good = Program(src, "c++", options).compile("cubin", cache=kcc.ProgramCache(s))
    [entry] = list((tmp_path / "c" / "v1" / "entries").glob("*/*[0-9a-f]"))
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x04
    entry.write_bytes(bytes(data))
    with kcache.open_store(cfg) as s:
        again = Program(src, "c++", options).compile("cubin", cache=kcc.ProgramCache(s))
        assert s.stats()["corrupt"] == 1
    assert bytes(again.code) == bytes(good.code)
    # cuda.core's own cache returns the flipped bytes as they are.
    fs = FileStreamProgramCache(tmp_path / "fs")
    key = make_program_cache_key(code=src, code_type="c++", options=options, target_type="cubin")
    fs[key] = good
    [f] = [p for p in (tmp_path / "fs").rglob("*") if p.is_file() and p.stat().st_size >= len(good.code)]
    raw = bytearray(f.read_bytes())
    raw[-10] ^= 0x04
    f.write_bytes(bytes(raw))
    assert fs.get(key) != bytes(good.code)


def test_owned_store_from_config(tmp_path: Path) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "c")
    cache = kcc.ProgramCache(config=cfg)
    cache[b"k"] = b"v"
    cache.close()
    assert cache.store.closed
    with kcache.open_store(cfg) as s:
        assert kcc.ProgramCache(s)[b"k"] == b"v"


def same_nvrtc_as_cuda_core(store: kcache.Store) -> bool:
    """Whether cuda.core's NVRTC is the version kcache compiles with (the one kcache's passports name)."""
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    probe = kcache.compile('extern "C" __global__ void probe() {}', arch="sm_90", store=store)
    return bool(probe.passport["producer"]["version"] == f"{major}.{minor}")


def test_compile_with_include_path_and_name_expressions(tmp_path: Path, store: kcache.Store) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.cuh").write_text("#define SCALE 2\n")
    src = '#include "scale.cuh"\n' + fresh(TEMPLATED).replace("x[i] *= s;", "x[i] *= s * SCALE;")
    options = ProgramOptions(arch="sm_90", include_path=[str(inc)], name="scale.cu")
    exprs = ("scale<float>", "scale<double>")
    # cuda.core refuses to key these compiles itself.
    with pytest.raises(ValueError):
        Program(src, "c++", options).compile("cubin", exprs, cache=FileStreamProgramCache(tmp_path / "fs"))
    # The bytes to match: cuda.core's own compile, or, where cuda.core loads another NVRTC than
    # kcache's toolkit (NVIDIA's nvrtc wheel, which torch brings, comes first for cuda.core), the
    # compile of kcache's NVRTC without a cache.
    off = kcache.open_store(kcache.Config.load(disable=True))
    same = same_nvrtc_as_cuda_core(store)

    def plain() -> ObjectCode:
        if same:
            return Program(src, "c++", options).compile("cubin", exprs)
        return kcc.compile(src, options, "cubin", name_expressions=exprs, store=off)

    uncached = plain()
    cold = kcc.compile(src, options, "cubin", name_expressions=exprs, store=store)
    warm = kcc.compile(src, options, "cubin", name_expressions=exprs, store=store)
    for obj in (cold, warm):
        assert isinstance(obj, ObjectCode)
        assert bytes(obj.code) == bytes(uncached.code)
        assert obj.symbol_mapping == uncached.symbol_mapping
        assert obj.name == uncached.name and obj.code_type == "cubin"
    assert store.stats()["hits"] >= 1
    # A header change is a new key and new bytes.
    (inc / "scale.cuh").write_text("#define SCALE 3\n")
    changed = kcc.compile(src, options, "cubin", name_expressions=exprs, store=store)
    assert bytes(changed.code) == bytes(plain().code)
    assert bytes(changed.code) != bytes(cold.code)


def test_options_are_formatted_again_whenever_anything_they_hold_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """kcache.cuda_core remembers ProgramOptions.as_bytes per options object, and only while
    every object it could depend on is the same (python/src/py_options_memo.cpp)."""
    from kcache import _kcache

    calls = []
    real = ProgramOptions.as_bytes

    def counted(self: ProgramOptions, *args: object) -> list[bytes]:
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(ProgramOptions, "as_bytes", counted)
    _kcache._forget_cuda_core_options()
    formatted = _kcache._cuda_core_options
    o = ProgramOptions(arch="sm_90", name="m.cu", include_path=["/a"])

    def check(expect_call: bool, target: str = "cubin") -> None:
        before = len(calls)
        got = formatted(o, "nvrtc", target)
        assert list(got) == real(o, "nvrtc", target)
        assert (len(calls) > before) == expect_call

    check(True)
    check(False)  # remembered
    o.include_path.append("/b")  # a list changed in place
    check(True)
    check(False)
    o.include_path[0] = "/z"
    check(True)
    o.debug = True  # a field assigned
    check(True)
    o.define_macro = [("A", "1"), "B"]  # tuples inside a list
    check(True)
    check(False)
    check(True, "ptx")  # another target
    o.extra = 1  # an attribute added
    check(True)
    del o.extra
    check(True)
    other = ProgramOptions(arch="sm_90", name="m.cu", include_path=["/a"])  # an equal object is its own
    before = len(calls)
    formatted(other, "nvrtc", "cubin")
    assert len(calls) == before + 1

    class Text(str):
        pass

    o.include_path = [Text("/s")]  # not comparable by identity: asked every time
    check(True)
    check(True)
    o.include_path = ["/s"]
    check(True)
    check(False)
    # An options object with no instance dictionary (cuda.core's internals moved) is asked every time.
    class Slotted:
        __slots__ = ("arch", "asked")

        def __init__(self) -> None:
            self.arch, self.asked = "sm_90", 0

        def as_bytes(self, backend: str, target: str) -> list[bytes]:
            self.asked += 1
            return [b"-arch=sm_90"]

    slotted = Slotted()
    assert list(formatted(slotted, "nvrtc", "cubin")) == list(formatted(slotted, "nvrtc", "cubin")) == [b"-arch=sm_90"]
    assert slotted.asked == 2
    # A patched as_bytes is asked, not the answer of the method it replaced.
    monkeypatch.setattr(ProgramOptions, "as_bytes", lambda self, *a: [b"-arch=sm_90", b"--patched"])
    assert list(formatted(o, "nvrtc", "cubin")) == [b"-arch=sm_90", b"--patched"]
    monkeypatch.setattr(ProgramOptions, "as_bytes", real)
    _kcache._forget_cuda_core_options()


def test_compile_follows_options_changed_in_place(tmp_path: Path, store: kcache.Store) -> None:
    inc_a, inc_b = tmp_path / "a", tmp_path / "b"
    for d, scale in ((inc_a, 2), (inc_b, 3)):
        d.mkdir()
        (d / "scale_in.cuh").write_text(f"#define SCALE_IN {scale}\n")
    src = '#include "scale_in.cuh"\n' + fresh(SAXPY).replace("a * x[i]", "a * SCALE_IN * x[i]")
    assert "SCALE_IN *" in src
    options = ProgramOptions(arch="sm_90", include_path=[str(inc_b)], name="scale_in.cu")
    off = kcache.open_store(kcache.Config.load(disable=True))
    first = kcc.compile(src, options, "cubin", store=store)
    options.include_path.insert(0, str(inc_a))  # now inc_a's header wins
    second = kcc.compile(src, options, "cubin", store=store)
    fresh_options = ProgramOptions(arch="sm_90", include_path=[str(inc_a), str(inc_b)], name="scale_in.cu")
    assert bytes(second.code) == bytes(kcc.compile(src, fresh_options, "cubin", store=off).code)
    assert bytes(second.code) != bytes(first.code)


def test_compile_errors_are_kcache_compile_errors(store: kcache.Store) -> None:
    with pytest.raises(kcache.CompileError) as e:
        kcc.compile("__global__ void k() { nope(); }", ProgramOptions(arch="sm_90"), "cubin", store=store)
    assert "nope" in e.value.log


def test_lowered_names_survive_a_new_process(tmp_path: Path) -> None:
    src = fresh(TEMPLATED)
    code = (
        "import json, kcache.cuda_core as kcc\n"
        "from cuda.core import ProgramOptions\n"
        f"o = kcc.compile({src!r}, ProgramOptions(arch='sm_90'), 'cubin', name_expressions=['scale<int>'])\n"
        "import hashlib\n"
        "print(json.dumps({'map': {k: v.decode() for k, v in o.symbol_mapping.items()},"
        " 'sha': hashlib.sha256(bytes(o.code)).hexdigest(),"
        " 'nvrtc': 'libnvrtc' in open('/proc/self/maps').read()}))\n"
    )
    env = {"KCACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, env=env)
    assert first.returncode == 0, first.stderr
    second = run_python(code, env=env)
    assert second.returncode == 0, second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["map"] == b["map"] == {"scale<int>": "_Z5scaleIiEvPT_S0_i"}
    assert a["sha"] == b["sha"]
    assert a["nvrtc"] is True and b["nvrtc"] is False
    # Each compile is one request of the route "cuda-core" (`kcache stats`): compiled, then served.
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache")) as s:
        core = s.stats()["requests"]["routes"]["cuda-core"]
    assert (core["total"], core["compiled"], core["served"]["disk"]) == (2, 1, 1), core


def test_program_cache_hits_in_a_new_process(tmp_path: Path) -> None:
    src = fresh(SAXPY)
    code = (
        "import hashlib, kcache, kcache.cuda_core as kcc\n"
        "from cuda.core import Program, ProgramOptions\n"
        f"o = Program({src!r}, 'c++', ProgramOptions(arch='sm_90')).compile('cubin', cache=kcc.ProgramCache())\n"
        "print(hashlib.sha256(bytes(o.code)).hexdigest(), kcache.default_store().stats()['hits'])\n"
    )
    env = {"KCACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, env=env)
    second = run_python(code, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    sha1, hits1 = first.stdout.split()
    sha2, hits2 = second.stdout.split()
    assert sha1 == sha2 and hits1 == "0" and int(hits2) >= 1
    # One cold and three warm runs: 3 served, 1 compiled (`kcache stats`, route "cuda-core").
    for _ in range(2):
        assert run_python(code, env=env).returncode == 0
    with kcache.open_store(kcache.Config.load(cache_dir=tmp_path / "cache")) as s:
        core = s.stats()["requests"]["routes"]["cuda-core"]
    assert (core["total"], core["compiled"], core["served"]["disk"]) == (4, 1, 3), core
