"""Errors are exceptions of one class per family, never a crash of the interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kcache
from kcache import _errors
from conftest import SAXPY, run_python


def test_compile_error_carries_the_log(store: kcache.Store) -> None:
    with pytest.raises(kcache.CompileError) as e:
        kcache.compile('extern "C" __global__ void k() { this_is_not_declared = 1; }', store=store)
    assert e.value.code == "compile_failed"
    assert "this_is_not_declared" in e.value.log
    # NVRTC rejected the program: kept as a negative entry (docs/keys.md, "Failed compiles"),
    # and the next compile raises the same error with the same log from it.
    assert store.stats()["entries"] == 1
    with pytest.raises(kcache.CompileError) as again:
        kcache.compile('extern "C" __global__ void k() { this_is_not_declared = 1; }', store=store)
    assert (again.value.code, str(again.value), again.value.log) == (e.value.code, str(e.value), e.value.log)


def test_bad_target_and_arch_are_invalid_argument(store: kcache.Store) -> None:
    with pytest.raises(kcache.Error):
        kcache.compile(SAXPY, target="exe", store=store)
    with pytest.raises(kcache.Error):
        kcache.compile(SAXPY, arch="sm_nope", store=store)


def test_wrong_argument_types_are_type_errors(store: kcache.Store) -> None:
    with pytest.raises(TypeError):
        kcache.compile(42, store=store)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        kcache.compile(SAXPY, options="-O3", store=store)
    with pytest.raises(TypeError):
        store.get(1234)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.put(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(kcache.InvalidArgument):
        kcache.Artifact.from_bytes(b"x", kind="Not A Kind")


def test_every_error_code_has_a_family() -> None:
    expect = {
        "invalid_argument": kcache.InvalidArgument,
        "not_found": kcache.NotFound,
        "corrupt": kcache.CorruptEntry,
        "io": kcache.CacheError,
        "no_space": kcache.CacheError,
        "permission_denied": kcache.CacheError,
        "read_only": kcache.CacheError,
        "unsupported": kcache.Unsupported,
        "timeout": kcache.CacheError,
        "compile_failed": kcache.CompileError,
        "toolkit_missing": kcache.ToolkitNotFound,
        "worker_crashed": kcache.WorkerCrashed,
        "busy": kcache.CacheError,
        "internal": kcache.InternalError,
    }
    for name, cls in expect.items():
        e = _errors.from_code(0, name, "m", "log")
        assert type(e) is cls and isinstance(e, kcache.Error) and e.code == name and e.log == "log"


def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "c", put="sync", memory_size=0, verify="full")
    with kcache.open_store(cfg) as s:
        art = kcache.Artifact.from_bytes(b"\x00" * 8192, kind="cubin")
        s.put(art)
    key = str(art.key)
    payload = tmp_path / "c" / "v1" / "entries" / key[:2] / key
    assert payload.is_file()
    data = bytearray(payload.read_bytes())
    data[100] ^= 0x01
    payload.write_bytes(bytes(data))
    with kcache.open_store(cfg) as s:
        assert s.get(art.key) is None
        assert s.stats()["corrupt"] >= 1
        assert s.get(art.key) is None


def flip_byte_in_place(path: Path, offset: int) -> None:
    """Changes one byte of `path` where it lies (same inode, same size)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x20]))


def test_a_flipped_byte_in_a_large_payload_is_a_miss_on_payload(tmp_path: Path) -> None:
    # Large payloads are read straight into the bytes object that .payload
    # returns and checked there, after a full check and after a fast one.
    cfg = kcache.Config.load(cache_dir=tmp_path / "c", put="sync", memory_size=0)
    payload = os.urandom((4 << 20) + 3)
    with kcache.open_store(cfg) as s:
        art = kcache.Artifact.from_bytes(payload, kind="cubin")
        s.put(art)
        for _ in range(2):  # SHA-256, then the recorded fast check
            got = s.get(art.key)
            assert got is not None and got.payload == payload
            assert got.payload is got.payload and bytes(got) is got.payload  # no copy after the read
            assert bytes(got.view) == payload
            mapped = s.get(art.key, copy=False)  # checked where it lies, for .view
            assert mapped is not None and bytes(mapped.view) == payload and mapped.payload == payload
            assert mapped.payload is not mapped.payload  # not read into a bytes object: .payload copies
        key = str(art.key)
        flip_byte_in_place(tmp_path / "c" / "v1" / "entries" / key[:2] / key, len(payload) - 2)
        assert s.get(art.key, copy=False) is None
        assert s.stats()["corrupt"] == 1
        assert not (tmp_path / "c" / "v1" / "entries" / key[:2] / key).exists()
        s.put(art)
        flip_byte_in_place(tmp_path / "c" / "v1" / "entries" / key[:2] / key, 7)
        assert s.get(art.key) is None
        assert s.stats()["corrupt"] == 2


def test_a_cache_root_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    cfg = kcache.Config.load(cache_dir=tmp_path / "file" / "cache")
    with pytest.raises(kcache.Error) as e:
        kcache.open_store(cfg)
    assert str(tmp_path / "file") in str(e.value)


def test_an_unusable_default_cache_warns_once_and_compiles_anyway(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    p = run_python(
        "import warnings, kcache\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    a = kcache.compile(" + repr(SAXPY) + ")\n"
        "    b = kcache.compile(" + repr(SAXPY) + ")\n"
        "print(a.outcome, b.outcome, len(w), 'compiling without the cache' in str(w[0].message))\n",
        env={"KCACHE_DIR": str(tmp_path / "file" / "cache")},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["compiled_only", "compiled_only", "1", "True"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"arch": "sm_90\0a"}, "arch"),
        ({"options": ["-DX=1\0"]}, "options"),
        ({"include_paths": ["/usr/include\0/etc"]}, "include_paths"),
        ({"name_expressions": ["f\0g"]}, "name_expressions"),
        ({"name": "k\0.cu"}, "name"),
        ({"source_path": "/tmp/a\0b.cu"}, "source_path"),
        ({"headers": {"a\0.h": "int x;"}}, "header name"),
    ],
)
def test_a_nul_byte_in_a_compile_argument_is_a_value_error_naming_it(kwargs: dict, named: str) -> None:
    for call in (kcache.compile, kcache.compile_key):
        with pytest.raises(ValueError) as e:
            call(SAXPY, cache=False, **kwargs) if call is kcache.compile else call(SAXPY, **kwargs)
        assert isinstance(e.value, kcache.InvalidArgument)
        assert named in str(e.value) and "NUL" in str(e.value)


@pytest.mark.parametrize("setting", ["cache_dir", "max_size", "cuda_home", "remote", "config_file"])
def test_a_nul_byte_in_a_setting_is_a_value_error_naming_it(tmp_path: Path, setting: str) -> None:
    with pytest.raises(ValueError) as e:
        kcache.Config.load(**{setting: str(tmp_path / "x") + "\0y"})
    assert isinstance(e.value, kcache.ConfigError)
    assert setting in str(e.value) and "NUL" in str(e.value)


def test_a_nul_byte_in_link_and_nvvm_options_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="options.*NUL"):
        kcache.link([("a.ptx", "ptx", b".version 8.0")], options=["-arch=sm_90\0"], cache=False)
    with pytest.raises(ValueError, match="arch.*NUL"):
        kcache.link([("a.ptx", "ptx", b".version 8.0")], arch="sm_90\0", cache=False)
    with pytest.raises(ValueError, match="input name.*NUL"):
        kcache.link([("a\0.ptx", "ptx", b".version 8.0")], cache=False)
    with pytest.raises(ValueError, match="name.*NUL"):
        kcache.nvvm_compile(b"ir", name="m\0.ll", cache=False)
    with pytest.raises(ValueError, match="arch.*NUL"):
        kcache.nvvm_compile(b"ir", arch="compute_90\0", cache=False)
