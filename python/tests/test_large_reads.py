"""A large hit handed to Python is the process's own memory: truncating or
writing the entry's file afterwards never kills the interpreter (SIGBUS) and
never changes the bytes that were checked (docs/python.md, "Zero-copy reads")."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from conftest import run_python

# 4 MiB: above FileStore::k_map_min_bytes (1 MiB), where a read used to map the file.
SIZE = 4 << 20

CHILD = r"""
import hashlib, os, sys, kcache
cache_dir, action, copy, memory = sys.argv_args
cfg = kcache.Config.load(cache_dir=cache_dir, put="sync", memory_size=memory)
payload = os.urandom(SIZE)
art = kcache.Artifact.from_bytes(payload)
with kcache.open_store(cfg) as writer:  # (its memory tier keeps the put's own bytes: not this store's)
    writer.put(art)
s = kcache.open_store(cfg)
if memory != "0":
    s.get(art.key, copy=False)  # a first hit fills the memory tier (with what the file tier read); the next is served from it
got = s.get(art.key, copy=copy == "copy")
key = str(art.key)
path = os.path.join(cache_dir, "v1", "entries", key[:2], key)
if action == "truncate":
    os.truncate(path, 0)
elif action == "shrink":
    os.truncate(path, SIZE // 2)
else:  # write into the file in place, as another program might
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"\xff" * 8192)
        f.seek(SIZE - 4096)
        f.write(b"\x00" * 4096)
view_ok = bytes(got.view) == payload
payload_ok = got.payload == payload
print("view", "same" if view_ok else "changed")
print("payload", "same" if payload_ok else "changed")
# The damaged file is a miss from now on, never the changed bytes.
again = s.get(art.key, copy=copy == "copy")
print("again", "none" if again is None else ("same" if again.payload == payload else "changed"))
"""


def _child(tmp_path: Path, action: str, copy: str, memory: str) -> list[str]:
    code = CHILD.replace("SIZE", str(SIZE)).replace(
        "sys.argv_args", repr((str(tmp_path / "c"), action, copy, memory))
    )
    p = run_python(code)
    # Never SIGBUS (-7): the interpreter lives and says what it saw.
    assert p.returncode != -signal.SIGBUS, "the interpreter was killed by SIGBUS"
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.parametrize("action", ["truncate", "shrink"])
@pytest.mark.parametrize("copy", ["nocopy", "copy"])
def test_a_truncated_entry_file_after_a_hit_never_kills_the_interpreter(tmp_path: Path, action: str, copy: str) -> None:
    lines = _child(tmp_path, action, copy, "0")
    assert lines[:2] == ["view same", "payload same"]
    assert lines[2] == "again none"


@pytest.mark.parametrize("copy", ["nocopy", "copy"])
def test_bytes_written_into_the_entry_file_after_a_hit_do_not_change_what_was_handed_out(
    tmp_path: Path, copy: str
) -> None:
    lines = _child(tmp_path, "write", copy, "0")
    assert lines[:2] == ["view same", "payload same"]
    assert lines[2] == "again none"  # a full check after the change: a miss, removed


def test_a_hit_from_the_memory_tier_is_not_the_file_either(tmp_path: Path) -> None:
    # The memory tier keeps what the file tier returned: it must be the
    # process's copy, not a mapping of the file.
    lines = _child(tmp_path, "truncate", "nocopy", "64M")
    assert lines[:2] == ["view same", "payload same"]
    assert lines[2] in ("again same", "again none")  # the memory tier may still answer: the checked bytes



def test_memory_tier_hits_hand_out_one_bytes_object_per_buffer(tmp_path: Path) -> None:
    # A memory-tier hit shares the tier's buffer; its .payload is one bytes
    # object for that buffer (no copy per hit), never another entry's bytes.
    import os

    import kcache

    cfg = kcache.Config.load(cache_dir=str(tmp_path / "c"), put="sync", memory_size="64M")
    with kcache.open_store(cfg) as s:
        one = kcache.Artifact.from_bytes(os.urandom(200 << 10), kind="cubin")
        two = kcache.Artifact.from_bytes(os.urandom(200 << 10), kind="cubin")
        s.put(one)
        s.put(two)
        first = s.get(one.key, copy=False)
        second = s.get(one.key, copy=False)
        assert first.served_from == second.served_from == "memory"
        assert first.payload == one.payload
        assert second.payload is first.payload
        other = s.get(two.key, copy=False)
        assert other.payload == two.payload
        assert other.payload is not first.payload
        small = kcache.Artifact.from_bytes(b"x" * 100, kind="cubin")
        s.put(small)
        assert s.get(small.key, copy=False).payload == b"x" * 100
    # From disk only (no memory tier): each hit is its own checked read.
    cfg = kcache.Config.load(cache_dir=str(tmp_path / "c"), put="sync", memory_size=0)
    with kcache.open_store(cfg) as s:
        a, b = s.get(one.key), s.get(one.key)
        assert a.payload == b.payload == one.payload
