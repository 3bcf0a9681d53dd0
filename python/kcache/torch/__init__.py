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

import functools
import importlib.util
import os
import sys

if importlib.util.find_spec("torch") is None:
    raise ImportError(
        "kcache.torch needs PyTorch, which is not installed in this environment: `pip install torch` "
        "(kcache.torch is tested with torch 2.15), or leave KCACHE_TORCH unset"
    )

from .. import _autoload, default_store
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


def _torch_moved(what: str) -> bool:  # (what install() returns then)
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
    """Put torch.compile's caches on kcache in this process (imports torch; Inductor's parts as they load).

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
    does not preprocess the header, docs/torch.md); ``untested_torch``: install on a torch
    outside ``TESTED`` (the internals are still checked; None: when KCACHE_TORCH_UNTESTED=1).

    Returns True when installed. On a torch outside ``TESTED``, or when kcache's cache cannot
    be opened, warns once and returns False: torch.compile runs as without kcache.

    What needs Inductor is done when Inductor's modules load (at once when they are loaded
    already), so that a process that imports torch and never compiles pays nothing for it; a
    torch whose internals moved is found then: one warning, and torch.compile runs as without
    kcache (``installed()`` then stays empty). Idempotent; ``uninstall()`` undoes it.
    """
    wanted = set(caches)
    if not wanted <= set(CACHES):
        raise ValueError(f"caches must be among {CACHES}, not {sorted(wanted - set(CACHES))}")
    if not compile_timeout > 0:
        raise ValueError(f"compile_timeout must be > 0 seconds, got {compile_timeout!r}")
    if store is not None and store.closed:
        raise ValueError("store is closed")
    torch = _common.tmod("torch")
    version = str(torch.__version__)
    if untested_torch is None:
        untested_torch = _autoload.enabled(os.environ.get("KCACHE_TORCH_UNTESTED"))
    if _series(version) not in TESTED and not untested_torch:
        _common.warn_once("version", f"torch {version} is not a version kcache.torch is tested with "
                                     f"({', '.join(TESTED)}); torch.compile runs without kcache "
                                     "(KCACHE_TORCH_UNTESTED=1 or install(untested_torch=True) tries anyway)")
        return False
    loaded = sys.modules.get("torch._inductor.remote_cache")
    if loaded is not None and not _has_seam(loaded):
        return _torch_moved("torch._inductor.remote_cache.RemoteCache.backend_override_cls")
    if store is None and default_store() is None:
        return False  # default_store() said why; Inductor's own caches stay on
    uninstall()
    settings.store = store
    settings.compile_timeout = float(compile_timeout)
    settings.single_flight = bool(single_flight)
    settings.per_rank = per_rank
    settings.torch_version = version
    _wanted.clear()
    _wanted.update(wanted)
    _state["precompiled_headers"] = precompiled_headers
    _state["pending"] = True
    _common.held()  # (a thread-local table made before the first compile's threads)
    generation = _state["generation"] = _state.get("generation", 0) + 1
    for module, step in _STEPS:
        _autoload.after_import(module, functools.partial(step, generation))
    if not _state["pending"]:
        return False  # Inductor was loaded already, and its internals moved (warned)
    if _wants_triton(triton):
        _install_triton(store, triton)
    _setenv("KCACHE_TORCH", "1")  # Inductor's compile workers install it too (kcache._autoload)
    return True


_env_saved: dict[str, str | None] = {}  # what install() set in os.environ: the values before, to restore


def _setenv(name: str, value: str) -> None:
    _env_saved.setdefault(name, os.environ.get(name))
    os.environ[name] = value


# What install() leaves to the moment Inductor's modules load: (module, step). A step of an
# older install() (another generation) does nothing.
_wanted: set[str] = set()
_state: dict[str, Any] = {"pending": False}


def _has_seam(remote_cache: Any) -> bool:
    base = getattr(remote_cache, "RemoteCache", None)
    return base is not None and hasattr(base, "backend_override_cls") and hasattr(remote_cache, "RemoteCacheBackend")


def _current(generation: int) -> bool:
    return bool(_state["pending"]) and _state.get("generation") == generation


def _step_pgo(generation: int) -> None:
    # Dynamo asks whether its PGO profiles have a remote before it imports remote_cache:
    # its switches are set when its PGO module loads (and restored if remote_cache fails us).
    if not _current(generation) or "pgo" not in _wanted:
        return
    mods = _config_modules()
    remote, local = "automatic_dynamic_remote_pgo", "automatic_dynamic_local_pgo"
    m = mods.get("torch._dynamo.config")
    if m is not None and hasattr(m, remote) and hasattr(m, local) and _user_wants(m, remote, local):
        _set(mods, "torch._dynamo.config", remote, True)
        _set(mods, "torch._dynamo.config", local, False)


def _step_remote(generation: int) -> None:
    if not _current(generation):
        return
    try:
        remote_cache = _common.tmod("torch._inductor.remote_cache")
        if not _has_seam(remote_cache):
            raise LookupError("torch._inductor.remote_cache.RemoteCache.backend_override_cls is missing")
        _apply(remote_cache)
    except Exception as e:  # an internal that is missing or not as expected
        _state["pending"] = False
        _undo()
        _torch_moved(f"{type(e).__name__}: {e}")
        return
    settings.on = True


def _step_codecache(generation: int) -> None:
    if not _current(generation):
        return
    from . import _cpp, _local

    missing = _local.patch_codecache()
    if "cpp" in _wanted:
        builds = _cpp.install_builds()
        if builds:
            _on.discard("cpp")
        missing += builds
    _warn_missing(missing)


def _step_isa(generation: int) -> None:
    if _current(generation) and "cpp" in _wanted:
        from . import _cpp

        _warn_missing(_cpp.install_isa_checks())


def _step_autograd_cache(generation: int) -> None:
    if not _current(generation):
        return
    from . import _local

    _warn_missing(_local.patch_autograd_cache())
    # Made before install() (a compile that ran already) with the old backend: made again.
    aot = getattr(sys.modules.get("torch._functorch._aot_autograd.autograd_cache"), "AOTAutogradCache", None)
    getattr(getattr(aot, "get_remote_cache", None), "cache_clear", lambda: None)()


def _warn_missing(missing: list[str]) -> None:
    if missing:
        _common.warn_once(f"moved-{missing[0]}", f"this torch has no {', '.join(missing)}: that part of torch.compile "
                                                 "stays Inductor's own (the rest is on kcache)")


_STEPS = (
    ("torch._dynamo.pgo", _step_pgo),
    ("torch._inductor.remote_cache", _step_remote),
    ("torch._inductor.codecache", _step_codecache),
    ("torch._inductor.cpu_vec_isa", _step_isa),
    ("torch._functorch._aot_autograd.autograd_cache", _step_autograd_cache),
)


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


def _user_wants(m: Any, remote: str, local: str | None) -> bool:
    # A cache the user turned off stays off (TORCHINDUCTOR_FX_GRAPH_CACHE=0 and the like); the
    # value before kcache.torch changed it, if it did.
    name = getattr(m, "__name__", "")
    was_remote = _saved.get((name, remote), getattr(m, remote))
    was_local = True if local is None else bool(_saved.get((name, local), getattr(m, local)))
    return was_remote is not False and bool(was_local or was_remote)


def _apply(remote_cache: Any) -> None:
    mods = _config_modules()
    by_name = {c.name: c for c in _remote.CACHES}
    for name, (mod, remote, local) in _SWITCHES.items():
        if name not in _wanted:
            continue
        m = mods.get(mod)
        cls = getattr(remote_cache, by_name[name].cls_name, None)
        if m is None or cls is None or not hasattr(m, remote) or (local is not None and not hasattr(m, local)):
            _common.warn_once(f"moved-{name}", f"this torch has no {by_name[name].cls_name} or {mod}.{remote}: "
                                               f"its {name} cache stays Inductor's")
            continue
        if name == "bundled-autotune" and not _gpu_available():
            continue  # Inductor asserts on it without a GPU backend (no Triton backend hash)
        if not _user_wants(m, remote, local):
            continue
        _overrides.setdefault(cls.__name__, cls.__dict__.get("backend_override_cls"))
        cls.backend_override_cls = _remote.factory(by_name[name])
        _set(mods, mod, remote, True)
        if local is not None:
            _set(mods, mod, local, False)
        _on.add(name)
    if "pgo" not in _on:  # (set early by _step_pgo; the cache did not go on kcache after all)
        for attr in ("automatic_dynamic_remote_pgo", "automatic_dynamic_local_pgo"):
            key = ("torch._dynamo.config", attr)
            if key in _saved:
                setattr(mods["torch._dynamo.config"], attr, _saved.pop(key))
    from . import _local

    _local.own({cls for name, cls in (("fx-graph", "FxGraphCache"), ("aot-autograd", "AOTAutogradCache"))
                if name in _on})
    if "cpp" in _wanted:
        _on.add("cpp")
        precompiled_headers = _state.get("precompiled_headers")
        if precompiled_headers is None and "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS" not in os.environ:
            precompiled_headers = False
        if precompiled_headers is not None and hasattr(mods["torch._inductor.config"], "cpp_cache_precompile_headers"):
            _set(mods, "torch._inductor.config", "cpp_cache_precompile_headers", bool(precompiled_headers))


def _gpu_available() -> bool:
    torch = _common.tmod("torch")
    try:
        return bool(torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()))
    except Exception:
        return False


def _wants_triton(triton: bool | None) -> bool:
    if triton is not None:
        return triton
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
        _setenv("KCACHE_TRITON", "1")  # Inductor's compile workers compile through kcache.triton too


def _undo() -> None:
    _common.give_up_all()
    _remote.remove_end_callback()
    remote_cache = sys.modules.get("torch._inductor.remote_cache")
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
    for (mod, attr), value in _saved.items():
        setattr(sys.modules[mod], attr, value)
    _saved.clear()
    from . import _cpp, _local

    _local.uninstall()
    _cpp.uninstall()
    _on.clear()


def uninstall() -> None:
    """Give torch.compile its own caches back: the configuration and environment variables install() changed, restored."""
    settings.on = False
    _state["pending"] = False
    _undo()
    settings.store = None
    ktriton = sys.modules.get("kcache.triton")
    if ktriton is not None and getattr(ktriton, "on_group", None) is not None:
        setattr(ktriton, "on_group", None)  # noqa: B010 (a module typed as ModuleType)
    for name, value in _env_saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _env_saved.clear()


def installed() -> list[str]:
    """The caches on kcache now (a subset of ``CACHES``), empty when not installed."""
    return [c for c in CACHES if c in _on] if settings.on else []


def stats() -> dict[str, dict[str, int]]:
    """This process's outcomes per cache: {cache: {outcome: count}} (outcomes in docs/torch.md)."""
    return _common.counts()
