"""Typed use of the kcache API; tests/test_typing.py checks it with mypy --strict."""

from __future__ import annotations

import kcache
import kcache.cuda_core
import kcache.plan


def use_store() -> int:
    config: kcache.Config = kcache.Config.load(max_size="1G", disable=False)
    with kcache.open_store(config) as store:
        art = kcache.Artifact.from_bytes(b"bytes", kind="blob", labels={"a": "b"})
        outcome: str = store.put(art)
        got: kcache.Artifact | None = store.get(art.key)
        if got is not None:
            data: bytes = got.payload
            view: memoryview = got.view
            names: dict[str, str] = got.lowered_names
            return len(data) + len(view) + len(names) + len(outcome)
        entries: list[kcache.Entry] = store.list()
        stats: dict[str, int] = store.stats()
        return len(entries) + stats["hits"]


def use_compile() -> bytes:
    art = kcache.compile("src", target="ptx", arch="sm_90", options=("-O3",), name_expressions=["k"],
                         headers={"h.cuh": b"x"}, include_paths=["inc"], name="k.cu")
    key: kcache.Key = kcache.compile_key("src")
    diffs: list[kcache.FieldDiff] = kcache.why_miss(art, key)
    linked = kcache.link([art, ("b.ltoir", "ltoir", b"...")], arch="sm_90", lto=True)
    ptx = kcache.nvvm_compile(b"ir", modules=[("libdevice.bc", b"...")])
    results: list[kcache.plan.EntryResult] = kcache.plan.build("plan.toml", host="sm=90", jobs=2,
                                                                on_event=lambda e: None)
    return linked.payload + ptx.payload + str(len(diffs) + len(results)).encode()


def use_errors() -> str:
    try:
        kcache.compile("src")
    except kcache.CompileError as e:
        return e.log
    except kcache.Error as e:
        return e.code
    return ""


def use_cuda_core() -> bytes:
    from cuda.core import ProgramOptions  # type: ignore[import-untyped]

    cache = kcache.cuda_core.ProgramCache()
    cache[b"k"] = b"v"
    value: bytes | None = cache.get(b"k")
    obj = kcache.cuda_core.compile("src", ProgramOptions(arch="sm_90"), "cubin", name_expressions=["k"])
    return (value or b"") + bytes(obj.code)
