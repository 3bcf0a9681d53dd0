"""kcache.bundle: create, verify, install, and the bundle tier, from Python."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kcache


def _config(cache: Path, **settings: object) -> kcache.Config:
    return kcache.Config.load(cache_dir=str(cache), put="sync", **settings)


def _fill(cache: Path) -> list[tuple[str, bytes]]:
    entries = []
    with kcache.open_store(_config(cache)) as store:
        for i, payload in enumerate([b"kernel-a" * 100, b"", b"engine" * 5000]):
            artifact = kcache.Artifact.from_bytes(payload, kind="cubin" if i == 0 else "blob")
            store.put(artifact)
            entries.append((str(artifact.key), payload))
    return entries


def test_create_verify_install_round_trip_and_reproducible(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    entries = _fill(ci)
    key_id = kcache.bundle.keygen(tmp_path / "ci.key")
    assert len(key_id) == 16
    assert (os.stat(tmp_path / "ci.key").st_mode & 0o777) == 0o600
    made = kcache.bundle.create(tmp_path / "b.kcb", sign=tmp_path / "ci.key", config=_config(ci))
    assert made["entries"] == 3 and made["signer"] == key_id
    again = kcache.bundle.create(tmp_path / "c.kcb", [k for k, _ in reversed(entries)], sign=tmp_path / "ci.key",
                                 config=_config(ci))
    assert (tmp_path / "b.kcb").read_bytes() == (tmp_path / "c.kcb").read_bytes()
    assert again["digest"] == made["digest"]

    info = kcache.bundle.verify(tmp_path / "b.kcb", trust=[tmp_path / "ci.key.pub"], config=_config(ci))
    assert sorted(e["key"] for e in info["entries"]) == sorted(k for k, _ in entries)
    fresh = tmp_path / "fresh"
    report = kcache.bundle.install(tmp_path / "b.kcb", trust=[tmp_path / "ci.key.pub"], config=_config(fresh))
    assert report == {"entries": 3, "installed": 3, "already_present": 0,
                      "bytes": sum(len(p) for _, p in entries), "pinned": 0}
    with kcache.open_store(_config(fresh)) as store:
        for key, payload in entries:
            got = store.get(key)
            assert got is not None and bytes(got.payload) == payload


def test_install_with_pin_pins_every_entry_even_those_already_present(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    entries = _fill(ci)
    kcache.bundle.keygen(tmp_path / "ci.key")
    kcache.bundle.create(tmp_path / "b.kcb", sign=tmp_path / "ci.key", config=_config(ci))
    fresh = tmp_path / "fresh"
    with kcache.open_store(_config(fresh)) as store:  # one entry is there before the install
        store.put(kcache.Artifact.from_bytes(entries[0][1], kind="cubin"))
    report = kcache.bundle.install(tmp_path / "b.kcb", trust=[tmp_path / "ci.key.pub"], config=_config(fresh),
                                   pin=True)
    assert report["installed"] == 2 and report["already_present"] == 1 and report["pinned"] == 3
    with kcache.open_store(_config(fresh)) as store:
        listed = {str(e.key): e.pinned for e in store.list()}
        assert listed == {k: True for k, _ in entries}
        assert store.stats()["pinned_entries"] == 3


def test_refusals_raise_bundle_refused_with_a_reason(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    _fill(ci)
    kcache.bundle.keygen(tmp_path / "ci.key")
    kcache.bundle.keygen(tmp_path / "other.key")
    kcache.bundle.create(tmp_path / "b.kcb", sign=tmp_path / "ci.key", config=_config(ci))
    with pytest.raises(kcache.BundleRefused) as untrusted:
        kcache.bundle.verify(tmp_path / "b.kcb", trust=[tmp_path / "other.key.pub"], config=_config(ci))
    assert untrusted.value.reason == "untrusted-key"
    data = bytearray((tmp_path / "b.kcb").read_bytes())
    data[-144 - 9] ^= 1  # the last byte of the last payload, just before its padding
    (tmp_path / "b.kcb").write_bytes(bytes(data))
    fresh = tmp_path / "fresh"
    with pytest.raises(kcache.BundleRefused) as changed:
        kcache.bundle.install(tmp_path / "b.kcb", trust=[tmp_path / "ci.key.pub"], config=_config(fresh))
    assert changed.value.reason == "payload-mismatch"
    with kcache.open_store(_config(fresh)) as store:
        assert store.list() == []


def test_the_bundles_setting_serves_hits_and_writes_nothing(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    entries = _fill(ci)
    kcache.bundle.keygen(tmp_path / "ci.key")
    image = tmp_path / "image"
    image.mkdir()
    kcache.bundle.create(image / "k.kcb", sign=tmp_path / "ci.key", config=_config(ci))
    (tmp_path / "ci.key.pub").rename(image / "ci.key.pub")
    fresh = tmp_path / "fresh"
    config = _config(fresh, bundles=str(image / "k.kcb"), bundle_trusted_keys=str(image / "ci.key.pub"))
    with kcache.open_store(config) as store:
        for key, payload in entries:
            got = store.get(key)
            assert got is not None and bytes(got.payload) == payload
    assert sorted(p.name for p in image.iterdir()) == ["ci.key.pub", "k.kcb"]
    entries_dir = fresh / "v1" / "entries"
    assert not entries_dir.exists() or not any(entries_dir.rglob("*.pass"))
