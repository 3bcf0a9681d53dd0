"""kcache.torch: torch.compile's caches on kcache (docs/torch.md).

One line turns it on::

    import kcache.torch; kcache.torch.install()

or, for a program you cannot edit, the environment alone: ``KCACHE_TORCH=1`` (kcache._autoload
runs ``install()`` right after ``torch`` imports, in every process, Inductor's compile workers
included).

Then every cache of torch.compile keeps its values in kcache's store (the same C++ library and
on-disk cache as every other kcache entry, its size cap, its remote tiers), one entry per value:

==========================  ==========================  =================================
Inductor's cache            kcache entry kind           written
==========================  ==========================  =================================
FX graph cache              ``torch-fx``                once per key, single-flight
AOTAutograd cache           ``torch-aot``               once per key, single-flight
autotune results            ``torch-autotune``          a new value replaces the entry
bundled autotune results    ``torch-bundled-autotune``  a new value replaces the entry
Dynamo PGO profiles         ``torch-pgo``               a new value replaces the entry
C++ builds (CPU kernels)    ``torch-cpp``               once per key, single-flight
==========================  ==========================  =================================

Every read is verified by kcache (size, SHA-256, key record; with a team key, the remote's
signature) before Inductor sees a byte: Inductor unpickles only what kcache verified, and a
damaged or forged entry is a miss and a recompile. Inductor's own local copies of these caches
(its FX graph, AOTAutograd and PGO files under ``TORCHINDUCTOR_CACHE_DIR``) are neither written
nor read while kcache holds them.

``install()`` is guarded by torch version (the versions in ``TESTED``) and by the internals it
uses; on any other torch it warns once and changes nothing: torch.compile runs as without kcache.
Importing this module does not import torch (it needs torch to be installed).
"""

from __future__ import annotations

import importlib.util
import os
import sys

if importlib.util.find_spec("torch") is None:
    raise ImportError(
        "kcache.torch needs PyTorch, which is not installed in this environment: `pip install torch` "
        "(kcache.torch is tested with torch 2.15), or leave KCACHE_TORCH unset"
    )

from .. import default_store
from . import _common, _remote
from ._common import settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from .. import Store

__all__ = ["CACHES", "KINDS", "TESTED", "install", "installed", "stats", "uninstall"]

TESTED = ("2.15",)  # the torch release series (major.minor) install() is tested with
CACHES = ("fx-graph", "aot-autograd", "autotune", "bundled-autotune", "pgo", "cpp")
KINDS = {c.name: c.kind for c in _remote.CACHES} | {"cpp": "torch-cpp"}

# The configuration install() changes: (module, attribute) -> the value it had, to restore.
_saved: dict[tuple[str, str], Any] = {}
_overrides: dict[str, Any] = {}  # RemoteCache class name -> its backend_override_cls before install
_on: set[str] = set()  # the caches on kcache now


def _series(version: str) -> str:
    parts = version.split("+", 1)[0].split(".")
    return ".".join(parts[:2])


def _torch_moved(what: str) -> bool:
    _common.warn_once("moved", f"this torch's internals moved ({what} is missing); torch.compile runs without kcache")
    return False


def install(
    *,
    store: Store | None = None,
    caches: Iterable[str] = CACHES,
    compile_timeout: float = 3600.0,
    single_flight: bool = True,
    per_rank: bool | None = None,
    triton: bool | None = None,
    precompiled_headers: bool | None = None,
    untested_torch: bool | None = None,
) -> bool:
    """Put torch.compile's caches on kcache in this process (imports torch and Inductor's configuration).

    ``store``: the kcache store to use (default: ``kcache.default_store()``; compile workers
    always use the default store); ``caches``: which of ``CACHES`` to put on kcache (the
    others stay Inductor's); ``compile_timeout``: the longest a compile holds its key before
    the processes waiting for it compile themselves; ``single_flight``: one compile per key
    across threads, processes and (with a Redis or S3 team remote) hosts; ``per_rank``: keep
    each distributed rank's entries apart (None: when an Inductor pass that bakes the rank into
    its code is on); ``triton``: make Triton's kernels under Inductor kcache entries too
    (``kcache.triton``) and keep Triton's file layout for Inductor's bundling and static
    launcher (None: when kcache.triton is on in this process or through KCACHE_TRITON);
    ``precompiled_headers``: Inductor's precompiled C++ header (None: off while the C++ builds
    are on kcache, unless TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS is set: a warm start then
    does not preprocess the header, docs/torch.md); ``untested_torch``: install on a torch outside ``TESTED`` (the internals are still checked;
    None: when KCACHE_TORCH_UNTESTED is set to 1).

    Returns True when installed. On a torch outside ``TESTED``, one whose internals moved, or
    when kcache's cache cannot be opened, warns once and returns False: torch.compile runs as
    without kcache. Idempotent; ``uninstall()`` undoes it.
    """
    wanted = set(caches)
    if not wanted <= set(CACHES):
        raise ValueError(f"caches must be among {CACHES}, not {sorted(wanted - set(CACHES))}")
    if not compile_timeout > 0:
        raise ValueError(f"compile_timeout must be > 0 seconds, got {compile_timeout!r}")
    torch = _common.tmod("torch")
    version = str(torch.__version__)
    if untested_torch is None:
        from .. import _autoload

        untested_torch = _autoload.enabled(os.environ.get("KCACHE_TORCH_UNTESTED"))
    if _series(version) not in TESTED and not untested_torch:
        _common.warn_once("version", f"torch {version} is not a version kcache.torch is tested with "
                                     f"({', '.join(TESTED)}); torch.compile runs without kcache "
                                     "(KCACHE_TORCH_UNTESTED=1 or install(untested_torch=True) tries anyway)")
        return False
    try:
        remote_cache = _common.tmod("torch._inductor.remote_cache")
    except ImportError as e:
        return _torch_moved(f"torch._inductor.remote_cache ({e})")
    base = getattr(remote_cache, "RemoteCache", None)
    if base is None or not hasattr(base, "backend_override_cls") or not hasattr(remote_cache, "RemoteCacheBackend"):
        return _torch_moved("torch._inductor.remote_cache.RemoteCache.backend_override_cls")
    if store is not None and store.closed:
        raise ValueError("store is closed")
    if store is None and default_store() is None:
        return False  # default_store() said why; Inductor's own caches stay on
    if _on:
        _undo()
    settings.store = store
    settings.compile_timeout = float(compile_timeout)
    settings.single_flight = bool(single_flight)
    settings.per_rank = per_rank
    settings.torch_version = version
    try:
        _apply(wanted, remote_cache, precompiled_headers)
    except Exception as e:  # an internal that is there but not as expected
        _undo()
        return _torch_moved(f"{type(e).__name__}: {e}")
    settings.on = True
    _common.held()  # (a thread-local table made before the first compile's threads)
    if _wants_triton(triton):
        _install_triton(store, triton)
    os.environ["KCACHE_TORCH"] = "1"  # Inductor's compile workers install it too (kcache._autoload)
    return True


def _config_modules() -> dict[str, Any]:
    mods = {name: _common.tmod(name) for name in ("torch._inductor.config", "torch._functorch.config")}
    try:
        mods["torch._dynamo.config"] = _common.tmod("torch._dynamo.config")
    except ImportError:
        pass
    return mods


# Per cache: the RemoteCache class, and (module, remote switch, local switch) of its configuration.
_SWITCHES = {
    "fx-graph": ("torch._inductor.config", "fx_graph_remote_cache", "fx_graph_cache"),
    "aot-autograd": ("torch._functorch.config", "enable_remote_autograd_cache", "enable_autograd_cache"),
    "autotune": ("torch._inductor.config", "autotune_remote_cache", None),
    "bundled-autotune": ("torch._inductor.config", "bundled_autotune_remote_cache", None),
    "pgo": ("torch._dynamo.config", "automatic_dynamic_remote_pgo", "automatic_dynamic_local_pgo"),
}


def _set(mods: dict[str, Any], mod: str, attr: str, value: Any) -> None:
    m = mods[mod]
    if (mod, attr) not in _saved:
        _saved[(mod, attr)] = getattr(m, attr)
    setattr(m, attr, value)


def _apply(wanted: set[str], remote_cache: Any, precompiled_headers: bool | None) -> None:
    mods = _config_modules()
    by_name = {c.name: c for c in _remote.CACHES}
    for name, (mod, remote, local) in _SWITCHES.items():
        if name not in wanted:
            continue
        m = mods.get(mod)
        cls = getattr(remote_cache, by_name[name].cls_name, None)
        if m is None or cls is None or not hasattr(m, remote) or (local is not None and not hasattr(m, local)):
            _common.warn_once(f"moved-{name}", f"this torch has no {by_name[name].cls_name} or {mod}.{remote}: "
                                               f"its {name} cache stays Inductor's")
            continue
        if name == "bundled-autotune" and not _gpu_available():
            continue  # Inductor asserts on it without a GPU backend (no Triton backend hash)
        # A cache the user turned off stays off (TORCHINDUCTOR_FX_GRAPH_CACHE=0 and the like).
        was_remote = getattr(m, remote)
        was_local = True if local is None else bool(getattr(m, local))
        if was_remote is False or not (was_local or was_remote):
            continue
        _overrides.setdefault(cls.__name__, cls.__dict__.get("backend_override_cls"))
        cls.backend_override_cls = _remote.factory(by_name[name])
        _set(mods, mod, remote, True)
        if local is not None:
            _set(mods, mod, local, False)
        _on.add(name)
    # Made before install() (a compile that ran already) with the old backend: made again.
    try:
        aot = _common.tmod("torch._functorch._aot_autograd.autograd_cache").AOTAutogradCache
        getattr(aot.get_remote_cache, "cache_clear", lambda: None)()
    except (ImportError, AttributeError):
        pass
    from . import _local

    owned = {"fx-graph": "FxGraphCache", "aot-autograd": "AOTAutogradCache"}
    missing = _local.install({cls for name, cls in owned.items() if name in _on})
    if missing:
        _common.warn_once("moved-local", f"this torch has no {', '.join(missing)}: Inductor's own local copies "
                                         "of its graphs are still written and read beside kcache's")
    if "cpp" in wanted:
        from . import _cpp

        missing = _cpp.install()
        if len(missing) < 2:
            _on.add("cpp")
            if precompiled_headers is None and "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS" not in os.environ:
                precompiled_headers = False
        if precompiled_headers is not None and hasattr(mods["torch._inductor.config"], "cpp_cache_precompile_headers"):
            _set(mods, "torch._inductor.config", "cpp_cache_precompile_headers", bool(precompiled_headers))
        if missing:
            _common.warn_once("moved-cpp", f"this torch has no {', '.join(missing)}: those C++ builds are "
                                           "Inductor's as without kcache")


def _gpu_available() -> bool:
    torch = _common.tmod("torch")
    try:
        return bool(torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()))
    except Exception:
        return False


def _wants_triton(triton: bool | None) -> bool:
    if triton is not None:
        return triton
    from .. import _autoload

    if _autoload.enabled(os.environ.get("KCACHE_TRITON")):
        return True
    if os.environ.get("TRITON_CACHE_MANAGER", "").startswith("kcache.triton"):
        return True
    knobs = sys.modules.get("triton.knobs")
    manager = getattr(getattr(knobs, "cache", None), "manager_class", None)
    return getattr(manager, "__module__", "") == "kcache.triton"


def _install_triton(store: Store | None, triton: bool | None) -> None:
    from .. import triton as ktriton
    from . import _triton

    if triton:
        try:
            ktriton.install(store=store, compile_timeout=settings.compile_timeout)
        except ImportError as e:
            _common.warn_once("triton", f"Triton cannot be imported ({e}); its kernels stay Triton's")
            return
    ktriton.on_group = _triton.on_group
    if not os.environ.get("TRITON_CACHE_MANAGER", "").startswith("kcache.triton"):
        os.environ["KCACHE_TRITON"] = "1"  # Inductor's compile workers compile through kcache.triton too


def _undo() -> None:
    _common.give_up_all()
    _remote.remove_end_callback()
    try:
        remote_cache = _common.tmod("torch._inductor.remote_cache")
    except ImportError:
        remote_cache = None
    for cls_name, old in _overrides.items():
        cls = getattr(remote_cache, cls_name, None)
        if cls is not None:
            if old is None:
                cls.backend_override_cls = None
                if "backend_override_cls" in cls.__dict__:
                    del cls.backend_override_cls
            else:
                cls.backend_override_cls = old
    _overrides.clear()
    if _saved:
        mods = _config_modules()
        for (mod, attr), value in _saved.items():
            setattr(mods[mod], attr, value)
        _saved.clear()
    from . import _cpp, _local

    _local.uninstall()
    _cpp.uninstall()
    _on.clear()


def uninstall() -> None:
    """Give torch.compile its own caches back (the configuration install() changed, restored)."""
    settings.on = False
    _undo()
    settings.store = None
    ktriton = sys.modules.get("kcache.triton")
    if ktriton is not None and getattr(ktriton, "on_group", None) is not None:
        setattr(ktriton, "on_group", None)  # noqa: B010 (a module typed as ModuleType)


def installed() -> list[str]:
    """The caches on kcache now (a subset of ``CACHES``), empty when not installed."""
    return [c for c in CACHES if c in _on] if settings.on else []


def stats() -> dict[str, dict[str, int]]:
    """This process's outcomes per cache: {cache: {outcome: count}} (outcomes in docs/torch.md)."""
    return _common.counts()
