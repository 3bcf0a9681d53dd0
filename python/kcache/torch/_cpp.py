"""Inductor's C++ builds on CPU (kernels, their Python bindings, precompiled headers) as kcache
entries of kind ``torch-cpp`` (docs/torch.md, "C++ kernels").

A graph served from the FX graph cache still carries its C++ kernels as source: loading it
compiles each one with the host compiler, unless the built library is already in Inductor's
directory. Every such build goes through ``torch._inductor.codecache._worker_compile_cpp(
lock_path, builders)`` (the lock file is named after Inductor's key of the build: the source
and the command line); kcache.torch puts itself in front of it:

- the target already in Inductor's directory: Inductor's own path, unchanged;
- else the verified entry of the build's key is written to the target (a new file, renamed
  into place) and nothing is compiled;
- else the key's single-flight lease is taken (or the holder's entry awaited), Inductor
  builds, and the built file becomes the entry.

The key adds what Inductor's leaves out: the compiler's version (``<compiler> -v``), the
Python interpreter and the CPU's vector ISA. A failing store never fails a build: Inductor
compiles as without kcache.
"""

from __future__ import annotations

import os

from .. import Error, _kcache
from . import _common
from ._common import count, settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

KIND = "torch-cpp"
NAME = "cpp"  # in kcache.torch.stats()
_MAX_ENTRY = 1 << 30  # larger builds are not cached (a precompiled header is tens of MB)

original: Any = None  # Inductor's _worker_compile_cpp while installed
_compilers: dict[str, str] = {}  # compiler -> its version text


def _compiler_version(compiler: str) -> str:
    version = _compilers.get(compiler)
    if version is None:
        cpp_builder = _common.tmod("torch._inductor.cpp_builder")
        version = _compilers[compiler] = cpp_builder.get_compiler_version_info(compiler) or "unknown"
    return version


def _fields(lock_path: str, builders: Sequence[Any]) -> list[tuple[str, str]]:
    name = os.path.basename(lock_path)
    if not name.endswith(".lock") or len(name) <= 5:
        raise ValueError(f"not an Inductor build lock: {lock_path}")
    target = builders[-1].get_target_file_path()
    compiler = builders[-1].get_command_line().split(None, 1)[0]
    import hashlib

    return [("kind", KIND), ("format", _common.KEY_FORMAT), ("torch_version", settings.torch_version),
            ("cache", NAME), ("key", name[:-5]), ("steps", str(len(builders))),
            ("target", os.path.splitext(target)[1]), ("compiler", compiler),
            ("compiler_version", hashlib.sha256(_compiler_version(compiler).encode()).hexdigest())
            ] + _common.host_fields()


def _place(target: str, data: bytes) -> bool:
    """Writes ``data`` as ``target`` (a new file renamed into place); False when it cannot."""
    import tempfile

    where = os.path.dirname(target) or "."
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".kcache-", suffix=os.path.splitext(target)[1])
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # as the linker makes it
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        _common.warn_once("cpp-place", f"cannot write {target} ({e}); Inductor builds it")
        return False
    return True


def worker_compile_cpp(lock_path: str, cpp_builders: Sequence[Any]) -> None:
    """Inductor's ``_worker_compile_cpp`` through kcache (module docstring)."""
    builders = tuple(cpp_builders)
    build = original
    if not settings.on or not builders or build is None:
        return build(lock_path, cpp_builders)  # type: ignore[no-any-return]
    try:
        target = builders[-1].get_target_file_path()
        if os.path.exists(target):
            return build(lock_path, cpp_builders)  # type: ignore[no-any-return]
        store = settings.the_store()
        if store is None:
            return build(lock_path, cpp_builders)  # type: ignore[no-any-return]
        fields = _fields(lock_path, builders)
    except Exception:  # an Inductor whose builders look different: its own path
        return build(lock_path, cpp_builders)  # type: ignore[no-any-return]
    key = _common.kkey(fields)
    flight = None
    try:
        got, remote = _common.lookup(store, key)
        if got is None and _common.settings.single_flight:
            flight = _kcache._Flight(store, key, settings.compile_timeout, _common.ROUTE)  # counts the request
            got = flight.wait()
            if got is not None:
                flight = None
                if got.kind == KIND and _place(target, got.payload):
                    count(NAME, "hit_after_wait")
                    return None
        elif got is not None and got.kind == KIND and _place(target, got.payload):
            _common.count_hit(NAME, remote)
            _common.request(store, "served", got)
            return None
    except Error as e:
        _common.store_error(NAME, "build", e)
        return build(lock_path, cpp_builders)  # type: ignore[no-any-return]
    count(NAME, "miss")
    try:
        build(lock_path, cpp_builders)
    except BaseException:
        if flight is not None:
            flight.abandon()
        else:
            _common.request(store, "failed")
        raise
    _publish(store, key, fields, target, flight)
    return None


def _publish(store: Any, key: _kcache.Key, fields: list[tuple[str, str]], target: str, flight: Any) -> None:
    try:
        with open(target, "rb") as f:
            data = f.read(_MAX_ENTRY + 1)
        if len(data) > _MAX_ENTRY:
            raise ValueError(f"{target} is over {_MAX_ENTRY} bytes")
        labels = {"torch.cache": NAME, "torch.key": dict(fields)["key"], "torch.version": settings.torch_version,
                  "torch.target": os.path.basename(target)}
        artifact = _kcache._record_artifact(_common.DOMAIN, fields, KIND, data, "torch", settings.torch_version,
                                            "", labels)
        if flight is not None:
            flight.deliver(store, artifact)  # the flight counts the request
        else:
            store.put(artifact)
            _common.request(store, "compiled")
        count(NAME, "put")
    except (Error, OSError, ValueError) as e:
        if flight is not None:
            flight.abandon(uncached=True)
        else:
            _common.request(store, "uncached")
        count(NAME, "error")
        _common.warn_once("cpp-put", f"cannot store Inductor's C++ build {target} ({e}); it is built, not cached")


# ---- the vector ISA checks --------------------------------------------------------------------

ISA_KIND = "torch-isa"
ISA_NAME = "isa"  # in kcache.torch.stats()
_ISA_OK = b"ok\n"
original_check: Any = None  # Inductor's VecISA.check_build while installed


def check_build(isa: Any, code: str) -> bool:
    """Inductor's ``VecISA.check_build`` through kcache: a verdict "builds and loads" is an entry.

    Before it vectorizes, Inductor compiles a test library with each vector ISA the CPU has
    (and loads it in a child process): a few host compiler runs per process with a new
    ``TORCHINDUCTOR_CACHE_DIR``. The verdict depends on what Inductor's own fingerprint of the
    check names (the compiler's version, the ISA's flags, torch's version) and the test code;
    kcache adds the host fields. Only a positive verdict is kept: a failed check (maybe a
    probe that timed out under load) is checked again by the next process, as Inductor does.
    """
    real = original_check
    if not settings.on or real is None:
        return bool(real(isa, code)) if real is not None else False
    store = settings.the_store()
    try:
        import hashlib

        fingerprint = _common.tmod("torch._inductor.cpu_vec_isa")._get_isa_dry_compile_fingerprint(
            isa.build_arch_flags())
        fields = [("kind", ISA_KIND), ("format", _common.KEY_FORMAT), ("torch_version", settings.torch_version),
                  ("cache", ISA_NAME), ("isa", str(isa)),
                  ("code", hashlib.sha256(code.encode()).hexdigest()),
                  ("fingerprint", hashlib.sha256(fingerprint.encode()).hexdigest())] + _common.host_fields()
    except Exception:  # an Inductor that checks differently: its own path
        return bool(real(isa, code))
    key = _common.kkey(fields)
    if store is not None:
        try:
            got, remote = _common.lookup(store, key)
            if got is not None and got.kind == ISA_KIND and got.payload == _ISA_OK:
                _common.count_hit(ISA_NAME, remote)
                _common.request(store, "served", got)
                return True
        except Error as e:
            _common.store_error(ISA_NAME, "lookup", e)
            store = None
    count(ISA_NAME, "miss")
    ok = bool(real(isa, code))
    if ok and store is not None:
        labels = {"torch.cache": ISA_NAME, "torch.isa": str(isa), "torch.version": settings.torch_version}
        try:
            store.put(_kcache._record_artifact(_common.DOMAIN, fields, ISA_KIND, _ISA_OK, "torch",
                                               settings.torch_version, "", labels))
            count(ISA_NAME, "put")
            _common.request(store, "compiled")
            return ok
        except (Error, ValueError) as e:
            _common.store_error(ISA_NAME, "put", e)
    if store is not None:
        _common.request(store, "uncached")  # a failed check is checked again, never stored
    return ok


# ---- install ------------------------------------------------------------------------------------


def install_builds() -> list[str]:
    """Puts kcache in front of Inductor's C++ builds (its codecache has loaded); what it could not wrap."""
    global original
    codecache = _common.tmod("torch._inductor.codecache")
    current = getattr(codecache, "_worker_compile_cpp", None)
    if current is None or not callable(current):
        return ["torch._inductor.codecache._worker_compile_cpp"]
    if current is not worker_compile_cpp:
        original = current
        codecache._worker_compile_cpp = worker_compile_cpp
    return []


def install_isa_checks() -> list[str]:
    """Puts kcache in front of Inductor's vector-ISA checks (cpu_vec_isa has loaded); what it could not wrap."""
    global original_check
    cpu_vec_isa = _common.tmod("torch._inductor.cpu_vec_isa")
    vec_isa = getattr(cpu_vec_isa, "VecISA", None)
    current = getattr(vec_isa, "__dict__", {}).get("check_build")
    if not callable(current) or not hasattr(cpu_vec_isa, "_get_isa_dry_compile_fingerprint"):
        return ["torch._inductor.cpu_vec_isa.VecISA.check_build"]
    if current is not check_build:
        original_check = current
        setattr(vec_isa, "check_build", check_build)  # noqa: B010
    return []


def uninstall() -> None:
    global original, original_check
    import sys

    codecache = sys.modules.get("torch._inductor.codecache")
    if original is not None and getattr(codecache, "_worker_compile_cpp", None) is worker_compile_cpp:
        codecache._worker_compile_cpp = original  # type: ignore[union-attr]
    original = None
    if original_check is not None:
        cpu_vec_isa = _common.tmod("torch._inductor.cpu_vec_isa")
        if cpu_vec_isa.VecISA.__dict__.get("check_build") is check_build:
            cpu_vec_isa.VecISA.check_build = original_check
    original_check = None
