"""kcache._jax_seams: the places in JAX's internals that kcache.jax uses, found and checked once.

JAX's persistent compilation cache is one object behind one module global
(``jax._src.compilation_cache._cache``, a ``CacheInterface`` with ``get(key)``
and ``put(key, value)``), which JAX's own tests replace. kcache.jax sets that
object, and wraps three functions around it, each for one reason JAX's seam
alone cannot serve (docs/jax.md, "How kcache.jax plugs in"):

=====================================================  ==========================================
``compilation_cache.get_executable_and_time``          the one read that leads to a compile (a
                                                       miss there takes the key's lease; any
                                                       other ``get`` only looks), the backend,
                                                       and an entry JAX cannot load made a miss
``compiler._cache_write``                              the compile time as JAX measured it, a
                                                       compile JAX will not store (its lease
                                                       given up at once), and the write from
                                                       processes other than 0
``compiler.compile_or_get_cached``                     a compile that raised gives its lease up
=====================================================  ==========================================

``find()`` checks that each is where kcache.jax expects it, with the
parameters it expects, and returns a ``Seams`` (or the reason it cannot, as
one sentence). Nothing here raises into JAX: every wrapper calls JAX's own
function when kcache is not JAX's cache.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# name -> the leading parameters kcache.jax passes on or reads, in order
_EXPECTED = {
    "get_executable_and_time": ("cache_key", "compile_options", "backend"),
    "_cache_write": ("cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"),
    "compile_or_get_cached": ("backend", "computation"),
}


def _version(text: str) -> tuple[int, ...]:
    """The leading numbers of a version ("0.10.2.dev20260101" -> (0, 10, 2))."""
    out = []
    for part in text.split(".")[:3]:
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _params(fn: Any) -> tuple[str, ...]:
    import inspect

    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _unwrapped(fn: Any) -> Any:
    """JAX's own function under a wrapper of an earlier install()."""
    while getattr(fn, "_kcache_seams", None) is not None:
        fn = fn.__wrapped__
    return fn


class Seams:
    """JAX's internals as kcache.jax uses them; made by find(), applied by kcache.jax.install()."""

    def __init__(self, jax: Any, cc: Any, compiler: Any, config: Any, distributed: Any, jaxlib_version: str) -> None:
        from . import jax as kjax

        self.cc, self.compiler, self.config, self.distributed = cc, compiler, config, distributed
        self.jax_version = str(jax.__version__)
        self.jaxlib_version = jaxlib_version
        self.untested = not (_version(kjax.TESTED_JAX[0]) <= _version(self.jax_version)[:3] <= _version(kjax.TESTED_JAX[1]))
        self.interface: Any = None
        self._saved: Any = None  # (JAX's _cache, _cache_initialized) before apply()
        self._originals = {
            "get_executable_and_time": _unwrapped(cc.get_executable_and_time),
            "_cache_write": _unwrapped(compiler._cache_write),
            "compile_or_get_cached": _unwrapped(compiler.compile_or_get_cached),
        }

    # -- state

    def active(self) -> bool:
        """True while JAX's cache is kcache's (directly, or inside JAX's VerificationCache)."""
        ours = self.interface
        if ours is None:
            return False
        current = self.cc._cache
        return current is ours or getattr(current, "_base_cache", None) is ours

    def min_compile_time(self) -> float:
        return float(self.config.persistent_cache_min_compile_time_secs.value)

    def set_min_compile_time(self, seconds: float) -> None:
        self.config.config.update("jax_persistent_cache_min_compile_time_secs", seconds)

    def process_id(self) -> int:
        return int(getattr(self.distributed.global_state, "process_id", 0) or 0)

    # -- apply / restore

    def apply(self, interface: Any) -> None:
        """Makes ``interface`` JAX's persistent cache and puts the wrappers in place."""
        cc = self.cc
        with cc._cache_initialized_mutex:
            if self._saved is None:
                self._saved = (cc._cache, cc._cache_initialized)
            cache = interface
            check = getattr(self.config, "compilation_cache_check_contents", None)  # jax 0.9 and later
            if check is not None and check.value and hasattr(cc, "VerificationCache"):
                cache = cc.VerificationCache(interface)  # JAX's debug check: recompile once, compare
            cc._cache = cache
            cc._cache_initialized = True  # JAX must not open its own directory over ours
        self.interface = interface
        cc.get_executable_and_time = _wrap_read(self, self._originals["get_executable_and_time"])
        self.compiler._cache_write = _wrap_write(self, self._originals["_cache_write"])
        self.compiler.compile_or_get_cached = _wrap_compile(self, self._originals["compile_or_get_cached"])

    def restore(self) -> None:
        cc = self.cc
        if getattr(cc.get_executable_and_time, "_kcache_seams", None) is self:
            cc.get_executable_and_time = self._originals["get_executable_and_time"]
        if getattr(self.compiler._cache_write, "_kcache_seams", None) is self:
            self.compiler._cache_write = self._originals["_cache_write"]
        if getattr(self.compiler.compile_or_get_cached, "_kcache_seams", None) is self:
            self.compiler.compile_or_get_cached = self._originals["compile_or_get_cached"]
        if self._saved is not None:
            with cc._cache_initialized_mutex:
                if self.active():
                    cc._cache, cc._cache_initialized = self._saved
            self._saved = None
        self.interface = None


def find() -> Seams | str:
    """The Seams of the jax installed here, or one sentence that says why there are none."""
    # importlib, not import statements: a type checker of kcache need not read all of jax.
    import importlib

    try:
        jax = importlib.import_module("jax")
    except ImportError as e:
        return f"jax is not installed or cannot be imported ({e}); install jax and jaxlib (pip install jax) to use kcache.jax"
    except Exception as e:  # a broken jax install: never an error for the program
        return f"jax cannot be imported ({type(e).__name__}: {e})"
    try:
        cc = importlib.import_module("jax._src.compilation_cache")
        compiler = importlib.import_module("jax._src.compiler")
        config = importlib.import_module("jax._src.config")
        distributed = importlib.import_module("jax._src.distributed")
        importlib.import_module("jax._src.compilation_cache_interface").CacheInterface  # noqa: B018
        jaxlib_version = importlib.import_module("jax._src.lib").version_str
    except (ImportError, AttributeError) as e:
        return f"jax {getattr(jax, '__version__', '?')}'s internals moved: kcache.jax cannot find what it uses ({e})"
    # seam checks: each name present, with the parameters kcache.jax relies on
    owners = {"get_executable_and_time": cc, "_cache_write": compiler, "compile_or_get_cached": compiler}
    for name, expected in _EXPECTED.items():
        fn = getattr(owners[name], name, None)
        if fn is None or _params(fn)[: len(expected)] != expected:
            return (f"jax {jax.__version__}'s internals moved: {owners[name].__name__}.{name} is not the function "
                    f"kcache.jax wraps (parameters {', '.join(expected)})")
    for name in ("_cache", "_cache_initialized", "_cache_initialized_mutex", "put_executable_and_time"):
        if not hasattr(cc, name):
            return f"jax {jax.__version__}'s internals moved: jax._src.compilation_cache.{name} is gone"
    for name in ("persistent_cache_min_compile_time_secs", "raise_persistent_cache_errors"):
        if not hasattr(config, name):
            return f"jax {jax.__version__}'s internals moved: jax config {name} is gone"
    if not hasattr(distributed, "global_state"):
        return f"jax {jax.__version__}'s internals moved: jax._src.distributed.global_state is gone"
    return Seams(jax, cc, compiler, config, distributed, str(jaxlib_version))


# ---- the wrappers -------------------------------------------------------------------------------


def _wrap_read(seams: Seams, original: Any) -> Any:
    from . import jax as kjax

    @functools.wraps(original)
    def get_executable_and_time(cache_key: Any, *args: Any, **kwargs: Any) -> Any:
        if not seams.active():
            return original(cache_key, *args, **kwargs)
        t = kjax._thread_state()
        backend = args[1] if len(args) > 1 else kwargs.get("backend")
        t.reading, t.backend = cache_key, backend
        seams.interface._backend = backend
        t.served.pop(cache_key, None)
        try:
            return original(cache_key, *args, **kwargs)
        except Exception as e:
            kkey = t.served.pop(cache_key, None)
            if kkey is None:
                raise  # not an entry kcache served: JAX's own handling (a warning)
            kjax._on_unloadable(kkey, cache_key, e)
        finally:
            t.reading = ""
        # The entry is gone: this read misses, takes the key's lease (or waits
        # for a process that compiles it) and JAX compiles.
        t.reading = cache_key
        try:
            return original(cache_key, *args, **kwargs)
        except Exception as e:
            kkey = t.served.pop(cache_key, None)
            if kkey is not None:
                kjax._on_unloadable(kkey, cache_key, e)
            return None, None
        finally:
            t.reading = ""

    get_executable_and_time._kcache_seams = seams  # type: ignore[attr-defined]
    return get_executable_and_time


def _wrap_write(seams: Seams, original: Any) -> Any:
    from . import jax as kjax

    @functools.wraps(original)
    def _cache_write(cache_key: Any, compile_time_secs: Any, module_name: Any, backend: Any, executable: Any,
                     host_callbacks: Any, *rest: Any, **kwargs: Any) -> Any:
        if not seams.active():
            return original(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks,
                            *rest, **kwargs)
        t = kjax._thread_state()
        t.backend = backend
        t.compile_time[cache_key] = float(compile_time_secs)
        try:
            if seams.process_id() == 0:
                return original(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks,
                                *rest, **kwargs)
            return _write_any_process(seams, cache_key, compile_time_secs, module_name, backend, executable,
                                      host_callbacks)
        finally:
            t.compile_time.pop(cache_key, None)
            if cache_key in t.flights:  # compiled and not put: JAX chose not to store it
                if host_callbacks:
                    reason = "host_callbacks"
                elif float(compile_time_secs) < seams.min_compile_time():
                    reason = "min_compile_time"
                else:
                    reason = ""  # a size threshold or a failed put: no note, the lease goes
                kjax._not_stored(cache_key, reason, float(compile_time_secs))

    _cache_write._kcache_seams = seams  # type: ignore[attr-defined]
    return _cache_write


def _write_any_process(seams: Seams, cache_key: Any, compile_time_secs: Any, module_name: Any, backend: Any,
                       executable: Any, host_callbacks: Any) -> None:
    # JAX writes from process 0 only, against write contention on shared file
    # systems. A kcache entry is written by the one process that holds the
    # key's lease and published with one commit point, so any process may:
    # the same rules as JAX's otherwise.
    if host_callbacks or float(compile_time_secs) < seams.min_compile_time():
        return
    try:
        seams.cc.put_executable_and_time(cache_key, module_name, executable, backend, int(compile_time_secs))
    except Exception as ex:
        if seams.config.raise_persistent_cache_errors.value:
            raise
        import warnings

        warnings.warn(f"Error writing persistent compilation cache entry for '{module_name}': "
                      f"{type(ex).__name__}: {ex}", stacklevel=2)


def _wrap_compile(seams: Seams, original: Any) -> Any:
    from . import jax as kjax

    @functools.wraps(original)
    def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
        if not seams.active():
            return original(*args, **kwargs)
        t = kjax._thread_state()
        before = set(t.flights)
        outer_backend = t.backend
        try:
            return original(*args, **kwargs)
        finally:
            # A lease this call took and did not publish: the compile raised.
            left = [k for k in t.flights if k not in before]
            if left:
                t.give_up(left)
            t.backend = outer_backend

    compile_or_get_cached._kcache_seams = seams  # type: ignore[attr-defined]
    return compile_or_get_cached
