"""kcache's exceptions: one class per error family, all under kcache.Error.

Every failed kcache call raises one of these (never a crash of the interpreter).
Each carries ``code`` (the C++ ErrorCode name, e.g. ``"no_space"``), ``message``
(one line that says what to do) and ``log`` (the compiler's log, for compiles).
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every kcache error."""

    code: str
    message: str
    log: str

    def __init__(self, message: str, code: str = "internal", log: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.log = log

    def __str__(self) -> str:
        return self.message


class InvalidArgument(Error, ValueError):
    """The caller passed something malformed: a bad key, an unknown option or target."""


class ConfigError(InvalidArgument):
    """A setting does not parse or is unknown (names the setting and what it accepts)."""


class CacheError(Error, OSError):
    """The cache itself failed: I/O, permissions, no space, read-only, busy, timeout."""


class NotFound(Error, LookupError):
    """A named thing that must exist does not (a file, an entry)."""


class CorruptEntry(CacheError):
    """Bytes failed a check (size, SHA-256, strict parse)."""


class CompileError(Error):
    """The compiler rejected the input; ``log`` holds its log (also shown by str())."""

    def __str__(self) -> str:
        return f"{self.message}\n{self.log.rstrip()}" if self.log else self.message


class ToolkitNotFound(Error):
    """A CUDA library (NVRTC, nvJitLink, NVVM) could not be loaded or is too old."""


class Unsupported(Error):
    """A feature, option or format this build or version does not handle."""


class WorkerCrashed(Error):
    """A worker process died or spoke garbage."""


class InternalError(Error):
    """A broken invariant inside kcache: a bug, please report it."""


class BundleRefused(Error):
    """A bundle was refused as a whole; ``reason`` names why (docs/bundle-format.md,
    "Refusals"): ``unsigned``, ``untrusted-key``, ``bad-signature``, ``digest-mismatch``,
    ``entry-mismatch``, ``payload-mismatch``, ``truncated``, ``trailing-bytes``, ...
    """

    reason: str

    def __init__(self, message: str, code: str = "corrupt", log: str = "") -> None:
        super().__init__(message, code, log)
        start = message.find(" refused (")
        end = message.find(")", start + 10)
        self.reason = message[start + 10 : end] if start >= 0 and end > start else ""


_BY_CODE: dict[str, type[Error]] = {
    "invalid_argument": InvalidArgument,
    "not_found": NotFound,
    "corrupt": CorruptEntry,
    "io": CacheError,
    "no_space": CacheError,
    "permission_denied": CacheError,
    "read_only": CacheError,
    "unsupported": Unsupported,
    "timeout": CacheError,
    "compile_failed": CompileError,
    "toolkit_missing": ToolkitNotFound,
    "worker_crashed": WorkerCrashed,
    "busy": CacheError,
    "internal": InternalError,
}


def from_code(code: int, name: str, message: str, log: str, family: str = "") -> Error:
    """The exception for a C++ kcache::Error (called by the extension module)."""
    cls = _BY_CODE.get(name, InternalError)
    if family == "bundle":
        return BundleRefused(message, name, log)
    if family == "config":
        cls = ConfigError if name in ("invalid_argument", "unsupported") else CacheError
    return cls(message, name, log)
