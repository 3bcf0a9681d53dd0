"""Triton under Inductor with kcache.triton on: Triton's own directory layout, kept for Inductor
(docs/torch.md, "Triton kernels under Inductor").

Inductor reads compiled kernels straight from ``triton_cache_dir(device)/<Triton's key>/``:
``TritonBundler.collect`` puts those files into the FX graph entry, and the static launcher
loads ``<name>.cubin`` from there. kcache.triton keeps a kernel's files in a directory of its
process, so without this an FX entry would carry no kernels and the static launcher would be
bypassed. kcache.torch therefore asks kcache.triton (its ``on_group`` hook) to copy every group
it serves or publishes into that directory, in the layout Triton's FileCacheManager writes
(the files, and ``__grp__<name>.json`` naming them), built in a temporary directory and renamed
into place whole. Only where Inductor has set ``TRITON_CACHE_DIR`` (in its processes and its
compile workers); the copies are working files of Inductor's directory, not entries.
"""

from __future__ import annotations

import os

from . import _common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def on_group(key: str, filename: str, files: Mapping[str, str]) -> None:
    """Copies one group (name -> path) into ``$TRITON_CACHE_DIR/<key>/``, once."""
    base = os.environ.get("TRITON_CACHE_DIR")
    if not base or not _common.settings.on:
        return
    if not key or "/" in key or key in (".", ".."):
        return
    dest = os.path.join(base, key)
    group = f"__grp__{filename}"
    if os.path.isfile(os.path.join(dest, group)):
        return
    import json
    import shutil
    import tempfile

    try:
        os.makedirs(base, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"tmp.kcache_{os.getpid()}_", dir=base)
    except OSError as e:
        _common.warn_once("triton-dir", f"cannot write Triton's files under {base} ({e}); Inductor's static "
                                        "launcher and kernel bundling are bypassed")
        return
    try:
        for name, path in files.items():
            shutil.copyfile(path, os.path.join(tmp, name))
        with open(os.path.join(tmp, group), "w") as f:
            json.dump({"child_paths": {name: os.path.join(dest, name) for name in files}}, f)
        try:
            os.rename(tmp, dest)  # whole, or not at all
            tmp = ""
        except OSError:  # there already (another process, or Inductor's bundle): complete it file by file
            os.makedirs(dest, exist_ok=True)
            for name in [*files, group]:
                if not os.path.exists(os.path.join(dest, name)):
                    os.replace(os.path.join(tmp, name), os.path.join(dest, name))
    except OSError as e:
        _common.warn_once("triton-dir", f"cannot write Triton's files under {base} ({e}); Inductor's static "
                                        "launcher and kernel bundling are bypassed")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
