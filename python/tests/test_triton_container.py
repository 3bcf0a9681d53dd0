"""kcache.triton's group container (pack_group / unpack_group), fuzzed: a
seeded mutation loop, bounded in time (KCACHE_FUZZ_SECONDS, default 2;
KCACHE_FUZZ_SEED, default 1). Every mutant is refused with ValueError, or
is itself the one encoding of the files it holds: unpack_group(b) then
pack_group gives b back, byte for byte. Needs no Triton."""

from __future__ import annotations

import os
import random
import struct
import time

import kcache.triton as kt


def _mutate(b: bytearray, rng: random.Random) -> None:
    op = rng.randrange(8)
    if not b:
        b.extend(rng.randbytes(rng.randrange(1, 64)))
    elif op == 0:
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif op == 1:
        b[rng.randrange(len(b))] = rng.randrange(256)
    elif op == 2:
        del b[rng.randrange(len(b)):]
    elif op == 3:
        b.extend(rng.randbytes(rng.randrange(1, 16)))
    elif op == 4:
        at = rng.randrange(len(b))
        b[at:at] = rng.randbytes(rng.randrange(1, 8))
    elif op == 5:
        at = rng.randrange(len(b))
        del b[at:at + rng.randrange(1, 16)]
    else:  # a length or count field set to an edge value
        at = rng.randrange(max(1, len(b) - 8))
        value = rng.choice([0, 1, 255, 256, 4096, 4097, 2**31, 2**32 - 1, 2**63, 2**64 - 1])
        size = rng.choice([4, 8])
        if at + size <= len(b):
            b[at:at + size] = struct.pack("<I" if size == 4 else "<Q", value % (2 ** (8 * size)))


def test_every_mutant_is_refused_or_is_the_one_encoding_of_its_files() -> None:
    seconds = float(os.environ.get("KCACHE_FUZZ_SECONDS", "2"))
    seed = int(os.environ.get("KCACHE_FUZZ_SEED", "1"))
    rng = random.Random(seed)
    original = kt.pack_group({"k.json": b'{"name": "k"}', "k.cubin": bytes(range(256)) * 4, "k.ptx": b".version 8.0\n",
                              "k.ttir": b"", "\u00e9.llir": "module".encode()})
    deadline = time.monotonic() + seconds
    mutants = accepted = 0
    while time.monotonic() < deadline:
        b = bytearray(original)
        for _ in range(rng.randrange(1, 5)):
            _mutate(b, rng)
        try:
            files = kt.unpack_group(bytes(b))
        except ValueError:
            pass
        else:
            accepted += 1
            assert kt.pack_group(files) == bytes(b), f"seed {seed}, mutant {mutants}: accepted with another encoding"
        mutants += 1
    assert mutants > 200, f"only {mutants} mutants in {seconds} s"
