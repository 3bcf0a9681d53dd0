"""kcache.onnx: kcache passports stamped into ONNX models (as ``kcache stamp`` / ``inspect``).

The work is done by kcache's ONNX module (``kcache_onnx.so``, installed beside
the extension; ``$KCACHE_ONNX_MODULE`` names another), the same one the
``kcache`` command loads on demand, so protobuf is loaded only when this
module is first used. docs/plans.md, "Passports in ONNX models".
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any

from . import _kcache
from ._errors import Unsupported, from_code

__all__ = ["inspect", "stamp", "verify"]

_STAMP = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p)
_READ = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_VERIFY = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
_CONTENT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Api(ctypes.Structure):
    _fields_ = [
        ("abi", ctypes.c_uint32),
        ("version", ctypes.c_char_p),
        ("stamp", _STAMP),
        ("read", _READ),
        ("verify", _VERIFY),
        ("content_sha256", _CONTENT),
        ("release", _RELEASE),
    ]


_api: Any = None


def _module() -> Any:
    global _api
    if _api is not None:
        return _api
    path = os.environ.get("KCACHE_ONNX_MODULE") or str(Path(__file__).with_name("kcache_onnx.so"))
    try:
        lib = ctypes.CDLL(path)
        entry = lib.kcache_onnx_module_v1
    except (OSError, AttributeError) as e:
        raise Unsupported(
            f"cannot load the kcache ONNX module {path}: {e}; reinstall kcache or set KCACHE_ONNX_MODULE",
            "unsupported",
        ) from None
    entry.restype = ctypes.POINTER(_Api)
    api = entry().contents
    if api.abi != 1 or api.version.decode() != _kcache.__version__:
        raise Unsupported(
            f"the ONNX module {path} is from kcache {api.version.decode()}, this is {_kcache.__version__}",
            "unsupported",
        )
    _api = (lib, api)
    return _api


def _call(name: str, *args: Any) -> Any:
    _, api = _module()
    doc = getattr(api, name)(*args)
    try:
        result = json.loads(ctypes.string_at(doc).decode())
    finally:
        api.release(doc)
    if not result.get("ok"):
        code = int(result.get("code", 14))
        names = {1: "invalid_argument", 2: "not_found", 3: "corrupt", 4: "io", 5: "no_space",
                 6: "permission_denied", 7: "read_only", 8: "unsupported", 9: "timeout",
                 10: "compile_failed", 11: "toolkit_missing", 12: "worker_crashed", 13: "busy"}
        raise from_code(code, names.get(code, "internal"), result.get("message", ""), "")
    return result["value"]


def _stamp_key(path: str) -> str:
    # As `kcache stamp`: the passport beside the file, else a key over the model's content.
    passport = Path(path + ".pass")
    if passport.is_file():
        return str(json.loads(passport.read_text())["key"])
    data = Path(path).read_bytes()
    content = _call("content_sha256", data, len(data))
    return str(_kcache._key_of_values("onnx", [("content", content)]))


def stamp(path: str | os.PathLike[str], key: _kcache.Key | str | None = None,
          labels: dict[str, str] | None = None) -> str:
    """Write kcache's stamp into the model's metadata; returns "stamped" or "unchanged".

    ``key``: the key to stamp (default: the passport beside the file, else a key
    over the model's content, as ``kcache stamp``). The file is replaced atomically.
    """
    p = os.fspath(path)
    k = str(key) if key is not None else _stamp_key(p)
    return str(_call("stamp", p.encode(), k.encode(), json.dumps(labels or {}).encode()))


def inspect(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The model's kcache stamp (compiled, key, content, producer, labels), or None."""
    value = _call("read", os.fspath(path).encode())
    return None if value is None else dict(value)


def verify(path: str | os.PathLike[str], key: _kcache.Key | str | None = None) -> dict[str, Any]:
    """Checks the stamp against the model's content (and ``key``); raises CorruptEntry."""
    k = None if key is None else str(key).encode()
    return dict(_call("verify", os.fspath(path).encode(), k))
