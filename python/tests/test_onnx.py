"""kcache.onnx: stamps in ONNX models through kcache's ONNX module."""

from __future__ import annotations


from pathlib import Path

import pytest

import kcache
from conftest import run_python


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def tiny_model(graph_name: bytes = b"g") -> bytes:
    """A minimal ONNX ModelProto, encoded by hand (ir_version, graph, opset_import)."""
    return _field(1, 8) + _field(7, _field(2, graph_name)) + _field(8, _field(2, 13))


def test_stamp_inspect_verify(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(tiny_model())
    assert kcache.onnx.inspect(model) is None
    assert kcache.onnx.stamp(model, labels={"team": "a"}) == "stamped"
    stamp = kcache.onnx.inspect(model)
    assert stamp is not None and stamp["labels"] == {"team": "a"}
    kcache.Key(stamp["key"])
    assert kcache.onnx.verify(model)["key"] == stamp["key"]
    assert kcache.onnx.stamp(model, labels={"team": "a"}) == "unchanged"
    with pytest.raises(kcache.Error):
        kcache.onnx.verify(model, key="0" * 64)


def test_a_changed_model_fails_verification(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(tiny_model(b"graph-one"))
    key = "ab" * 32
    assert kcache.onnx.stamp(model, key=key) == "stamped"
    data = model.read_bytes().replace(b"graph-one", b"graph-two")
    model.write_bytes(data)
    with pytest.raises(kcache.CorruptEntry):
        kcache.onnx.verify(model)


def test_not_a_model_is_an_error_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff\xff not protobuf")
    with pytest.raises(kcache.Error):
        kcache.onnx.stamp(bad)


def test_import_kcache_does_not_load_protobuf() -> None:
    p = run_python("import kcache\nprint('protobuf' in open('/proc/self/maps').read(), 'kcache.onnx' in __import__('sys').modules)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"]

