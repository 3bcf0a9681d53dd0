"""Remembers Triton's ``triton_key()`` across processes (kcache.triton.install).

``triton.runtime.cache.triton_key()`` SHA-256-hashes ``libtriton.so`` (about
500 MB) and every Python file of Triton's compiler, backends and language in
every new process, before the first cache lookup. Its value changes only when
one of those files changes, so it is remembered in a memo file, valid while
every file it read and every directory those files lie in still has the same

    (path, size, mtime_ns, ctime_ns, inode)

and the function itself is the same code (the memo holds a digest of its
marshalled code object and the Python version). Which files it reads is not
guessed: while the real function runs once, the ``open`` of its module is one
that records every path opened (and its identity at open time); when a file
changed while it was read, nothing is remembered.

Memo file (docs/triton.md, "Warm starts"), JSON, one per Triton installation
and interpreter: ``<cache_dir>/v1/triton/key-<16 hex>.json``::

    {"format": 1, "code": HEX64, "python": str, "value": str,
     "files": [[path, size, mtime_ns, ctime_ns, inode], ...],
     "dirs":  [[path, size, mtime_ns, ctime_ns, inode], ...]}

Written to a temporary file beside it and renamed over it. A memo that cannot
be read, parsed or validated is recomputed; one that cannot be written is
skipped silently (the value is still returned).
"""

from __future__ import annotations

import builtins
import hashlib
import json
import marshal
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

_FORMAT = 1
_MAX_MEMO_BYTES = 4 << 20


def _signature(path: str) -> list[Any] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _code_digest(fn: Callable[[], str]) -> str:
    code = getattr(fn, "__code__", None)
    raw = marshal.dumps(code) if code is not None else repr(fn).encode()
    return hashlib.sha256(raw).hexdigest()


def memo_path(cache_dir: str, module: ModuleType) -> str:
    """The memo file of the Triton installation that holds ``module``, for this interpreter."""
    ident = f"{os.path.abspath(getattr(module, '__file__', '') or '')}\0{sys.executable}\0{sys.version}"
    return os.path.join(cache_dir, "v1", "triton", "key-" + hashlib.sha256(ident.encode()).hexdigest()[:16] + ".json")


def _read_memo(path: str) -> bytes:
    """At most _MAX_MEMO_BYTES + 1 bytes of the memo file ``path``, read as kcache reads its own files:
    never following a symlink, never blocking (a FIFO put there is refused, not waited on).
    Raises OSError when it is missing or not a regular file."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read(_MAX_MEMO_BYTES + 1)


def _read_valid(path: str, code: str) -> str | None:
    try:
        raw = _read_memo(path)
        if len(raw) > _MAX_MEMO_BYTES:
            return None
        memo = json.loads(raw)
        if not isinstance(memo, dict) or memo.get("format") != _FORMAT or memo.get("code") != code:
            return None
        if memo.get("python") != sys.version or not isinstance(memo.get("value"), str):
            return None
        recorded = memo.get("files", []) + memo.get("dirs", [])
        if not memo.get("files"):
            return None
        for sig in recorded:
            if not isinstance(sig, list) or len(sig) != 5 or not isinstance(sig[0], str):
                return None
            if _signature(sig[0]) != sig:
                return None
        return str(memo["value"])
    except (OSError, ValueError, TypeError):
        return None


def _write(path: str, memo: dict[str, Any]) -> None:
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(memo, f)
        os.replace(tmp, path)
    except OSError:
        pass


def computed(fn: Callable[[], str], module: ModuleType) -> tuple[str, list[list[Any]] | None]:
    """Runs ``fn`` (whose module is ``module``) once, recording the files it opens.

    Returns its value and the signatures of those files, or None in place of
    the signatures when a file changed while it was read (or it opened none).
    """
    opened: dict[str, list[Any] | None] = {}

    def recording_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        f = builtins.open(file, *args, **kwargs)
        try:
            path = os.path.abspath(os.fspath(file))
            st = os.fstat(f.fileno())
            opened.setdefault(path, [path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
        except (TypeError, OSError):
            opened.setdefault(str(file), None)
        return f

    had = "open" in module.__dict__
    saved = module.__dict__.get("open")
    module.open = recording_open  # type: ignore[attr-defined]
    try:
        value = fn()
    finally:
        if had:
            module.open = saved  # type: ignore[attr-defined]
        else:
            del module.open
    sigs = list(opened.values())
    if not sigs or any(s is None or _signature(s[0]) != s for s in sigs):
        return value, None
    return value, sigs  # type: ignore[return-value]


def memoized(fn: Callable[[], str], module: ModuleType, path: str) -> tuple[str, bool]:
    """``fn()`` from the memo at ``path`` when every file it covers is unchanged, else computed and remembered.

    Returns the value and whether it came from the memo.
    """
    code = _code_digest(fn)
    value = _read_valid(path, code)
    if value is not None:
        return value, True
    value, files = computed(fn, module)
    if files is not None:
        dirs = []
        for d in dict.fromkeys(os.path.dirname(s[0]) for s in files):
            sig = _signature(d)
            if sig is not None:
                dirs.append(sig)
        _write(path, {"format": _FORMAT, "code": code, "python": sys.version, "value": value,
                      "files": files, "dirs": dirs})
    return value, False


# ---- `<tool> --version`, remembered -----------------------------------------------------------
#
# Triton's NVIDIA backend runs `ptxas --version` twice in every new process
# (triton.knobs.NvidiaTool.from_path and get_ptxas_version), 15-40 ms each. The
# output is a function of the binary, so it is remembered like the key: valid
# while the tool's (path, size, mtime_ns, ctime_ns, inode) are unchanged, in
#
#   <cache_dir>/v1/triton/tools.json
#     {"format": 1, "tools": {"<path>\0<stderr merged: 0|1>": {"sig": [...], "out": HEX}}}
#
# Only exactly `check_output([ABSOLUTE_PATH, "--version"])` (optionally with
# stderr=STDOUT) is answered from it; every other call goes to subprocess.


class ToolVersions:
    """Stands in for the ``subprocess`` module of a Triton module (everything else is delegated)."""

    def __init__(self, real: ModuleType, path: str) -> None:
        self._real = real
        self._path = path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _load(self) -> dict[str, Any]:
        try:
            raw = _read_memo(self._path)
            memo = json.loads(raw) if len(raw) <= _MAX_MEMO_BYTES else None
            if isinstance(memo, dict) and memo.get("format") == _FORMAT and isinstance(memo.get("tools"), dict):
                return memo["tools"]  # type: ignore[no-any-return]
        except (OSError, ValueError):
            pass
        return {}

    def check_output(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        merged = kwargs.get("stderr") == self._real.STDOUT
        simple = (not rest and set(kwargs) <= {"stderr"} and (merged or "stderr" not in kwargs)
                  and isinstance(args, list) and len(args) == 2 and args[1] == "--version"
                  and isinstance(args[0], str) and os.path.isabs(args[0]))
        if not simple:
            return self._real.check_output(args, *rest, **kwargs)
        name = f"{args[0]}\0{int(merged)}"
        before = _signature(args[0])
        tools = self._load()
        known = tools.get(name)
        if before is not None and isinstance(known, dict) and known.get("sig") == before:
            try:
                return bytes.fromhex(str(known["out"]))
            except (KeyError, ValueError):
                pass
        out = self._real.check_output(args, *rest, **kwargs)
        if before is not None and _signature(args[0]) == before:
            tools[name] = {"sig": before, "out": bytes(out).hex()}
            _write(self._path, {"format": _FORMAT, "tools": tools})
        return out


def tools_path(cache_dir: str) -> str:
    """The memo file of tool versions under ``cache_dir``."""
    return os.path.join(cache_dir, "v1", "triton", "tools.json")
