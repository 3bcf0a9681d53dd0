"""kcache._autoload: kcache's framework integrations, turned on from the environment alone.

For a program you cannot edit, one environment variable turns an integration
on (docs/python.md, "Turning an integration on from the environment"):

==================  ==========================  =====================================
variable            integration                 installed once this module is imported
==================  ==========================  =====================================
``KCACHE_TORCH=1``  ``kcache.torch.install()``  ``torch``
``KCACHE_JAX=1``    ``kcache.jax.install()``    ``jax``
``KCACHE_TRITON=1`` ``kcache.triton.install()`` ``triton``
==================  ==========================  =====================================

The package installs ``kcache-autoload.pth`` at the top of site-packages. Its
one line runs at every interpreter start-up and costs a few dictionary
lookups when none of the variables is set; when one is, it imports this
module and calls ``activate()``. A variable set to ``0``, ``false``, ``no``,
``off`` or the empty string counts as unset.

``activate()`` installs nothing by itself and imports no framework: it puts
an import hook in front of ``sys.meta_path`` that runs the integration's
``install()`` right after the framework's top-level package has finished
importing (or at once, if it already is imported). A program that never
imports the framework pays nothing more. Subprocesses inherit the variable,
so the compile workers a framework starts (Inductor's, for one) turn the
integration on too; an integration's ``install()`` sets its variable for the
same reason.

An integration that fails to install warns once (``RuntimeWarning``) and
steps aside: the framework runs as without kcache. Nothing here raises into
the program's import.

``after_import(name, callback)`` is the same hook for any module, a submodule
too: an integration's install() puts off with it what needs a part of the
framework that a program may never import (kcache.torch: Inductor's modules).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["INTEGRATIONS", "activate", "after_import", "enabled", "imported", "requested"]

# variable -> (framework's top-level module, kcache module whose install() runs)
INTEGRATIONS: dict[str, tuple[str, str]] = {
    "KCACHE_TORCH": ("torch", "kcache.torch"),
    "KCACHE_JAX": ("jax", "kcache.jax"),
    "KCACHE_TRITON": ("triton", "kcache.triton"),
}

_OFF = ("", "0", "false", "no", "off")


def enabled(value: str | None) -> bool:
    """True when an integration variable's ``value`` turns it on."""
    return value is not None and value.strip().lower() not in _OFF


def requested(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """The integration variables set to "on" in ``environ`` (default: ``os.environ``), in table order."""
    env = os.environ if environ is None else environ
    return [var for var in INTEGRATIONS if enabled(env.get(var))]


_pending: dict[str, str] = {}  # framework module -> kcache module, not yet installed
_after: dict[str, list[Callable[[], None]]] = {}  # module -> what runs once it has imported (after_import)
_done: set[str] = set()
_hook: _PostImportFinder | None = None


def _install(kcache_module: str, var: str) -> None:
    if kcache_module in _done:
        return
    _done.add(kcache_module)
    try:
        import importlib

        importlib.import_module(kcache_module).install()
    except Exception as exc:  # never break the program's import
        import warnings

        warnings.warn(
            f"kcache: {var} is set but {kcache_module}.install() failed ({type(exc).__name__}: {exc}); "
            "the framework runs without kcache",
            RuntimeWarning,
            stacklevel=2,
        )


class _PostImportFinder:
    """A meta-path finder that runs an install() after a framework's top-level package has imported.

    It finds nothing itself: for a watched name it asks the finders behind it
    for the spec and wraps the spec's loader so that ``exec_module`` calls the
    install once the package's ``__init__`` has run.
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _pending and fullname not in _after:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_install(module: ModuleType) -> None:
            exec_module(module)
            _fire(fullname)

        try:
            loader.exec_module = exec_then_install  # type: ignore[method-assign]
        except (AttributeError, TypeError):
            return spec
        return spec


def _fire(framework: str) -> None:
    for callback in _after.pop(framework, ()):
        _call(framework, callback)
    kcache_module = _pending.pop(framework, None)
    if kcache_module is None:
        return
    var = next(v for v, (f, _) in INTEGRATIONS.items() if f == framework)
    _install(kcache_module, var)


def _call(module: str, callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception as exc:  # never break the program's import
        import warnings

        warnings.warn(f"kcache: what was to run after {module} imported failed ({type(exc).__name__}: {exc})",
                      RuntimeWarning, stacklevel=2)


def imported(name: str) -> bool:
    """True when module ``name`` has finished importing (it is in sys.modules and not still running)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Runs ``callback()`` once module ``name`` (any module, a submodule too) has finished importing.

    At once when it has, or when it is importing now (its import can no longer be watched). For
    an integration's install(): kcache.torch puts off what needs Inductor until Inductor's
    modules load, so that a process that imports the framework and never compiles pays nothing
    for it. What ``callback`` raises is warned about (RuntimeWarning), never raised.
    """
    global _hook
    if name in sys.modules:
        _call(name, callback)
        return
    _after.setdefault(name, []).append(callback)
    if _hook is None:
        _hook = _PostImportFinder()
        sys.meta_path.insert(0, _hook)


def activate(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """Arranges the install() of every integration whose variable is on; returns those variables.

    Idempotent. An integration whose framework is already imported is
    installed at once; the others when their framework is first imported.
    """
    global _hook
    wanted = requested(environ)
    for var in wanted:
        framework, kcache_module = INTEGRATIONS[var]
        if kcache_module in _done:
            continue
        if framework in sys.modules:
            _install(kcache_module, var)
        else:
            _pending[framework] = kcache_module
    if _pending and _hook is None:
        _hook = _PostImportFinder()
        sys.meta_path.insert(0, _hook)
    return wanted
