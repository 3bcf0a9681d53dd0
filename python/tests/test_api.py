"""The kcache Python API over the real library: keys, stores, config, compiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kcache
from conftest import SAXPY, TEMPLATED, run_python


def test_import_loads_no_cuda_library_and_not_cuda_core() -> None:
    p = run_python(
        "import sys, kcache\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('cuda.core' in sys.modules, 'libnvrtc' in maps, 'libcuda' in maps)\n"
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False", "False"]


def test_key_round_trips_through_hex() -> None:
    hex64 = "0123456789abcdef" * 4
    key = kcache.Key(hex64)
    assert str(key) == hex64 and key.hex == hex64
    assert kcache.Key(str(key)) == key
    assert hash(kcache.Key(hex64)) == hash(key)
    assert len(key.digest) == 32
    assert repr(key) == f"kcache.Key('{hex64}')"


@pytest.mark.parametrize("bad", ["", "../x", "ABCDEF" * 10 + "ABCD", "0" * 63, "0" * 65, "0" * 63 + "\0"])
def test_bad_keys_are_invalid_argument(bad: str) -> None:
    with pytest.raises(kcache.InvalidArgument) as e:
        kcache.Key(bad)
    assert isinstance(e.value, ValueError)
    assert e.value.code == "invalid_argument"


def test_store_put_get_list_remove_stats(store: kcache.Store) -> None:
    payload = os.urandom(100_000)
    art = kcache.Artifact.from_bytes(payload, kind="ptx", labels={"model": "resnet"})
    assert art.kind == "ptx" and art.outcome == "made" and len(art) == len(payload)
    assert store.put(art) == "stored"
    assert store.put(art) == "already_present"
    got = store.get(art.key)
    assert got is not None and got.outcome == "hit"
    assert got.payload == payload
    assert bytes(got.view) == payload and got.view.readonly
    assert got.passport["key"] == str(art.key)
    assert got.passport["labels"] == {"model": "resnet"}
    assert got.passport["payload"]["size"] == len(payload)
    assert store.get(str(art.key)) is not None  # hex str accepted
    entries = store.list()
    assert [(e.key, e.kind, e.payload_size) for e in entries] == [(art.key, "ptx", len(payload))]
    stats = store.stats()
    assert stats["hits"] >= 2 and stats["entries"] == 1
    # The same counters as `kcache stats --json`, temp files of killed writers included.
    for name in ("metadata_bytes", "temp_files", "temp_bytes", "stale_temp_files", "stale_temp_bytes"):
        assert stats[name] >= 0, name
    assert stats["stale_temp_files"] == 0
    assert store.remove(art.key) is True
    assert store.remove(art.key) is False
    assert store.get(art.key) is None


def test_store_pin_unpin(store: kcache.Store) -> None:
    art = kcache.Artifact.from_bytes(os.urandom(5000), kind="blob")
    missing = kcache.Artifact.from_bytes(b"never stored", kind="blob")
    with pytest.raises(kcache.NotFound):
        store.pin(missing.key)
    assert store.put(art) in ("stored", "queued")
    assert store.pin(art.key) is True  # a queued put is published first
    assert store.pin(str(art.key)) is False
    stats = store.stats()
    assert stats["pinned_entries"] == 1 and stats["pinned_bytes"] > 5000
    assert stats["pins_over_cap"] is False
    assert [e.pinned for e in store.list() if e.key == art.key] == [True]
    assert store.unpin(art.key) is True
    assert store.unpin(art.key) is False
    assert store.stats()["pinned_entries"] == 0
    assert store.remove(art.key) is True


def test_the_key_of_from_bytes_is_content_and_kind_only() -> None:
    a = kcache.Artifact.from_bytes(b"same bytes", kind="blob")
    b = kcache.Artifact.from_bytes(b"same bytes", kind="blob", labels={"x": "y"})
    c = kcache.Artifact.from_bytes(b"same bytes", kind="ptx")
    assert a.key == b.key and a.key != c.key


def test_view_outlives_its_artifact(store: kcache.Store) -> None:
    art = kcache.Artifact.from_bytes(b"x" * 4096)
    store.put(art)
    got = store.get(art.key)
    assert got is not None
    view = got.view
    del got
    assert bytes(view) == b"x" * 4096


def test_config_load_with_overrides(tmp_path: Path) -> None:
    c = kcache.Config.load(cache_dir=tmp_path, max_size="10M", disable=False, memory_size=0)
    assert c.cache_dir == str(tmp_path)
    assert c.max_size == 10 << 20 and c.memory_size == 0 and c.disable is False
    assert c.origin("max_size") == "command line"
    assert c.origin("fsync") == "default"
    assert c["max_size"] and set(c.as_dict()) == set(kcache.setting_names())


def test_config_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(kcache.ConfigError) as e:
        kcache.Config.load(cache_dir=tmp_path, max_size="lots")
    assert "max_size" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(kcache.ConfigError):
        kcache.Config.load(no_such_setting="1")
    with pytest.raises(kcache.ConfigError):
        kcache.Config.load(max_size=[1])


def test_compile_cold_then_hit(store: kcache.Store) -> None:
    first = kcache.compile(SAXPY, arch="sm_90", store=store)
    assert first.outcome == "compiled" and first.kind == "cubin"
    assert first.payload[:4] == b"\x7fELF"
    second = kcache.compile(SAXPY, arch="sm_90", store=store)
    assert second.outcome == "hit"
    assert second.payload == first.payload and second.key == first.key
    assert second.passport["producer"]["name"] == "nvrtc"
    ptx = kcache.compile(SAXPY, target="ptx", arch="sm_90", store=store)
    assert ptx.kind == "ptx" and b".entry saxpy" in ptx.payload
    assert kcache.compile_key(SAXPY, arch="sm_90") == first.key


def test_name_expressions_give_lowered_names_on_hits(store: kcache.Store) -> None:
    exprs = ["scale<float>", "scale<double>"]
    cold = kcache.compile(TEMPLATED, name_expressions=exprs, store=store)
    warm = kcache.compile(TEMPLATED, name_expressions=exprs, store=store)
    assert warm.outcome == "hit"
    assert cold.lowered_names == warm.lowered_names
    assert warm.lowered_names["scale<float>"] == "_Z5scaleIfEvPT_S0_i"


def test_disk_and_memory_headers_are_in_the_key(tmp_path: Path, store: kcache.Store) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "factor.cuh").write_text("#define FACTOR 2.0f\n")
    src = '#include "factor.cuh"\n#include "mem.cuh"\nextern "C" __global__ void k(float* x) { x[0] = FACTOR * MEM; }\n'
    headers = {"mem.cuh": "#define MEM 3.0f\n"}
    a = kcache.compile(src, include_paths=[inc], headers=headers, store=store)
    assert a.outcome == "compiled"
    assert kcache.compile(src, include_paths=[inc], headers=headers, store=store).outcome == "hit"
    (inc / "factor.cuh").write_text("#define FACTOR 4.0f\n")
    b = kcache.compile(src, include_paths=[inc], headers=headers, store=store)
    assert b.outcome == "compiled" and b.key != a.key and b.payload != a.payload
    c = kcache.compile(src, include_paths=[inc], headers={"mem.cuh": "#define MEM 5.0f\n"}, store=store)
    assert c.outcome == "compiled" and c.key != b.key
    diffs = kcache.why_miss(a, b)
    assert diffs and all(d.left != d.right for d in diffs)
    assert any("factor.cuh" in d.name or "header" in d.name for d in diffs), diffs


def test_why_miss_names_the_option_and_looks_keys_up(store: kcache.Store) -> None:
    a = kcache.compile(SAXPY, store=store)
    b = kcache.compile(SAXPY, options=["-use_fast_math"], store=store)
    diffs = kcache.why_miss(a, b)
    assert len(diffs) >= 1
    assert any("fast" in (d.right or "") or "fast" in (d.left or "") for d in diffs), diffs
    assert kcache.why_miss(a.key, b.key, store=store) == diffs
    assert kcache.why_miss(a, a) == []
    with pytest.raises(kcache.NotFound):
        kcache.why_miss("0" * 64, a, store=store)


def test_compile_without_cache(store: kcache.Store) -> None:
    a = kcache.compile(SAXPY, cache=False)
    assert a.outcome == "compiled_only"
    assert store.get(a.key) is None


def test_link_ltoir_to_cubin(store: kcache.Store) -> None:
    a = kcache.compile(SAXPY, target="ltoir", options=["-dlto"], store=store)
    assert a.kind == "ltoir"
    cubin = kcache.link([a], arch="sm_90", lto=True, store=store)
    assert cubin.kind == "cubin" and cubin.payload[:4] == b"\x7fELF"
    assert cubin.outcome == "compiled"
    again = kcache.link([(f"{a.key}.ltoir", "ltoir", a.payload)], arch="sm_90", lto=True, store=store)
    assert again.outcome == "hit" and again.payload == cubin.payload


NVVM_IR = """
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define void @kernel(float addrspace(1)* %p) {
  store float 1.0, float addrspace(1)* %p
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (float addrspace(1)*)* @kernel, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
"""


def test_nvvm_compile_to_ptx(store: kcache.Store) -> None:
    a = kcache.nvvm_compile(NVVM_IR, arch="compute_90", store=store)
    assert a.kind == "ptx" and b".entry kernel" in a.payload
    assert kcache.nvvm_compile(NVVM_IR, arch="compute_90", store=store).outcome == "hit"


def test_closed_store_raises_and_close_is_idempotent(config: kcache.Config) -> None:
    s = kcache.open_store(config)
    with s:
        assert not s.closed
    assert s.closed
    s.close()
    with pytest.raises(kcache.InvalidArgument):
        s.get("0" * 64)


def test_plan_build_reports_built_then_reused(tmp_path: Path, store: kcache.Store) -> None:
    (tmp_path / "k.cu").write_text(SAXPY)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'version = 1\noutput_dir = "out"\n\n[[entry]]\nname = "saxpy"\nbuilder = "nvrtc"\ninputs = ["k.cu"]\n'
    )
    events: list[dict] = []
    cold = kcache.plan.build(plan, host="sm=90,jp=na,trt=na", on_event=events.append, store=store)
    assert [(r.name, r.outcome) for r in cold] == [("saxpy", "built")]
    path = Path(cold[0].path)
    assert path.is_file() and path.read_bytes()[:4] == b"\x7fELF"
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() == cold[0].sha256
    assert cold[0].seconds is not None
    assert any(e.get("event") == "engine.build.summary" for e in events), events
    warm = kcache.plan.build(plan, host="sm=90,jp=na,trt=na", store=store)
    assert [r.outcome for r in warm] == ["reused"]


def test_plan_errors_are_exceptions_with_every_problem(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('version = 1\n\n[[entry]]\nname = "x"\nbuilder = "nvrtc"\nprecison = "fp16"\ninputs = ["none.cu"]\n')
    with pytest.raises(kcache.InvalidArgument) as e:
        kcache.plan.build(plan, host="sm=90", cache=False)
    assert "precison" in e.value.log


def test_plan_callback_exception_is_reraised(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(SAXPY)
    plan = tmp_path / "plan.toml"
    plan.write_text('version = 1\noutput_dir = "out"\n[[entry]]\nname = "s"\nbuilder = "nvrtc"\ninputs = ["k.cu"]\n')

    def boom(event: dict) -> None:
        raise RuntimeError("from the callback")

    with pytest.raises(RuntimeError, match="from the callback"):
        kcache.plan.build(plan, host="sm=90", on_event=boom, cache=False)


def test_stats_count_a_memory_fill_as_no_put_and_list_no_remote(tmp_path: Path) -> None:
    cfg = kcache.Config.load(cache_dir=tmp_path / "c", put="sync")
    art = kcache.Artifact.from_bytes(b"counted once " + os.urandom(8))
    with kcache.open_store(cfg) as writer:
        writer.put(art)
        assert writer.stats()["puts"] == 1
    with kcache.open_store(cfg) as reader:
        written = reader.stats()["bytes_written"]
        got = reader.get(art.key)  # from the file tier, copied into the memory tier
        assert got is not None and got.payload == art.payload
        st = reader.stats()
        assert st["puts"] == 1 and st["bytes_written"] == written
        assert st["hits"] == 1 and st["remote"] == []
        assert reader.get(art.key) is not None  # now from the memory tier
        assert reader.stats()["puts"] == 1
