"""kcache.bundle: signed bundle files that ship cache entries (as ``kcache bundle``).

A bundle holds a chosen set of entries with their passports, signed with an
Ed25519 key; a machine that trusts the public key installs it, or serves it in
place as a read-only tier (the ``bundles`` setting, ``KCACHE_BUNDLES``). See
docs/bundles.md; the format is docs/bundle-format.md.

Every reader refuses a bundle as a whole, raising ``kcache.BundleRefused``
whose ``reason`` names why (``unsigned``, ``untrusted-key``,
``digest-mismatch``, ``payload-mismatch``, ``entry-mismatch``, ...).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from . import Config, Key, _kcache

__all__ = ["create", "install", "keygen", "ls", "verify"]

_Path = str | os.PathLike[str]


def _config(config: Config | None) -> Config:
    return config if config is not None else Config.load()


def _trust(trust: Iterable[_Path] | None) -> list[str] | None:
    return None if trust is None else [os.fspath(t) for t in trust]


def keygen(path: _Path, public: _Path | None = None) -> str:
    """Write a new Ed25519 signing key to ``path`` (mode 0600) and its public key
    to ``public`` (default: ``path + ".pub"``). Never replaces a file. Returns the key id."""
    private = os.fspath(path)
    return _kcache._bundle_keygen(private, os.fspath(public) if public is not None else private + ".pub")


def create(
    path: _Path,
    keys: Iterable[Key | str] | None = None,
    *,
    sign: _Path | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Write the entries ``keys`` (default: every entry) of the on-disk cache of
    ``config`` into the bundle ``path``, signed with the private key file ``sign``.

    The same entries always give the same bytes. Returns ``{file, entries,
    payload_bytes, file_bytes, digest, signer}``. Raises NotFound for a key
    that is not in the cache.
    """
    wanted = None if keys is None else [str(k) for k in keys]
    return _kcache._bundle_create(os.fspath(path), wanted, None if sign is None else os.fspath(sign), _config(config))


def verify(path: _Path, trust: Iterable[_Path] | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Check the whole bundle (structure, digest, every passport, the signature
    against ``trust`` — public key files; default: the ``bundle_trusted_keys``
    setting — and every payload). Returns ``{file, file_bytes, payload_bytes,
    digest, signed, signer, entries: [{key, kind, size, arch, host, producer}]}``.
    Raises BundleRefused."""
    return _kcache._bundle_verify(os.fspath(path), _trust(trust), _config(config))


def ls(path: _Path) -> dict[str, Any]:
    """What ``verify`` returns, after checking the structure, digest and passports
    only: the signer is shown, not judged. Raises BundleRefused."""
    return _kcache._bundle_ls(os.fspath(path))


def install(
    path: _Path, trust: Iterable[_Path] | None = None, *, config: Config | None = None, pin: bool = False
) -> dict[str, int]:
    """Check the whole bundle as ``verify`` does, then import every entry into the
    on-disk cache of ``config``. Nothing is installed unless every check passes.
    With ``pin=True`` every entry is also pinned (never evicted by the size cap),
    as ``kcache bundle install --pin`` does.
    Returns ``{entries, installed, already_present, bytes, pinned}``. Raises
    BundleRefused."""
    return _kcache._bundle_install(os.fspath(path), _trust(trust), _config(config), pin)
