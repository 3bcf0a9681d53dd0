"""The files kcache.triton hands to Triton: this process's run directories (docs/triton.md,
"Files on disk: where Triton's paths point").

Triton wants paths. Verified groups are written into ``<root>/<domain>-<pid>-<start>/g<N>/``
and the files a compile stages into ``.../s<N>/`` (root: a private memory filesystem when there
is one, else ``<cache_dir>/v1/triton/run``); single files (a launcher ``.so``, loaded with
dlopen) into the cache directory's run directory. Directories 0700, files 0600, valid for the
life of the process, removed at exit, and swept by the next process once their pid is gone.

Thread-safe: a module lock guards the sequence numbers and the tables.
"""

from __future__ import annotations

import _thread
import atexit
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

_lock = _thread.allocate_lock()


def _proc_start(pid: int) -> str | None:
    """The start time of process ``pid`` (``/proc/PID/stat`` field 22), or None when there is no such process.

    Raises OSError when it cannot tell (out of descriptors, /proc not readable): a
    sweep then keeps the directory, since a live process's files must never go.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (ValueError, IndexError):
        raise OSError(f"/proc/{pid}/stat cannot be parsed") from None


def _pid_domain() -> str:
    # Pids mean something within one boot and pid namespace only: another
    # namespace's directories are never swept (their pids are not ours to test).
    import hashlib

    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            parts.append(f.read().strip())
        parts.append(os.readlink("/proc/self/ns/pid").encode())
    except OSError:
        return "0" * 16
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _memory_root() -> str | None:
    """A private directory on a memory filesystem for this user, or None.

    ``$XDG_RUNTIME_DIR/kcache-triton`` (per user, tmpfs), else
    ``/dev/shm/kcache-triton-<uid>``; used only when it is a real directory (not a
    symlink) owned by this user with no access for others.
    """
    import stat

    uid = os.getuid()
    for base, name in ((os.environ.get("XDG_RUNTIME_DIR"), "kcache-triton"), ("/dev/shm", f"kcache-triton-{uid}")):
        if not base or not os.path.isdir(base):
            continue
        root = os.path.join(base, name)
        try:
            try:
                os.mkdir(root, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(root)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and st.st_mode & 0o077 == 0:
            return root
    return None


class _RunDir:
    """``<root>/<domain>-<pid>-<start>/``: files of this process (module docstring).

    ``disk`` runs live under ``<cache_dir>/v1/triton/run``; memory runs under
    ``_memory_root()`` (falling back to disk when there is none, or once a write
    there failed: a full /dev/shm).
    """

    def __init__(self, memory: bool) -> None:
        self.memory = memory
        self.pid = 0
        self.path = ""
        self.seq = 0

    def get(self, cache_dir: str) -> str:
        pid = os.getpid()
        if self.pid == pid and self.path:
            return self.path
        with _run_lock:  # two threads' first files: one directory, one sequence
            if self.pid == pid and self.path:
                return self.path
            return self._make(cache_dir, pid)

    def _make(self, cache_dir: str, pid: int) -> str:
        import tempfile

        root = _memory_root() if self.memory else None
        if root is None:
            root = os.path.join(cache_dir, "v1", "triton", "run")
        domain = _pid_domain()
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
            _sweep(root, domain, pid)
            path = os.path.join(root, f"{domain}-{pid}-{_own_start(pid)}")
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            path = tempfile.mkdtemp(prefix="kcache-triton-")
        self.pid, self.path, self.seq = pid, path, 0
        return path

    def fresh(self, cache_dir: str, prefix: str) -> str:
        """A new, empty directory in this process's run directory (made again if it was removed)."""
        for attempt in (0, 1):
            base = self.get(cache_dir)
            with _lock:
                self.seq += 1
                seq = self.seq
            path = os.path.join(base, f"{prefix}{seq}")
            try:
                os.mkdir(path, 0o700)
                return path
            except FileNotFoundError:
                if attempt:
                    raise
                with _run_lock:  # removed underneath (a cleaner): start a new one
                    if self.path == base:
                        self.pid, self.path = 0, ""
        raise AssertionError("unreachable")

    def to_disk(self) -> None:
        """From now on, this process's files go to the cache directory (those written stay until exit)."""
        if self.path and self.pid == os.getpid():
            left.append(self.path)
        self.memory = False
        self.pid, self.path = 0, ""


def _own_start(pid: int) -> str:
    try:
        return _proc_start(pid) or "0"
    except OSError:
        return "0"


def _sweep(root: str, domain: str, me: int) -> None:
    import shutil

    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != domain or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == me:
            continue
        try:
            start = _proc_start(pid)
        except OSError:
            continue  # cannot tell: keep it
        if start is None or start != parts[2]:
            # Another process may sweep it at the same moment: whatever is already gone is fine.
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


_run_lock = _thread.allocate_lock()
run = _RunDir(memory=False)  # single files (a launcher .so must be on an exec mount)
run_memory = _RunDir(memory=True)  # groups read from the store, files a compile stages


def _remove(r: _RunDir) -> None:
    # Only the process that made it (a forked child has its own, or none).
    if r.path and r.pid == os.getpid():
        import shutil

        shutil.rmtree(r.path, ignore_errors=True)


left: list[str] = []  # memory run directories given up by to_disk(), removed at exit


@atexit.register
def _remove_run_dirs() -> None:
    _remove(run)
    _remove(run_memory)
    if left:
        import shutil

        for path in left:
            shutil.rmtree(path, ignore_errors=True)


# What Triton's CompiledKernel reads of a group on a hit (Triton 2.x and 3.x,
# triton/compiler/compiler.py): the first ".json" file of the group as the
# metadata (a JSON object whose "target" names backend, arch and warp_size,
# and whose "name" is the kernel's), then every other file: the backend's
# binary (".cubin" for CUDA, ".hsaco" for HIP) as bytes, which it must find,
# and the rest as text.
_BINARY_EXT = {"cuda": "cubin", "hip": "hsaco"}


def missing_for_triton(name: str, files: Mapping[str, bytes]) -> str | None:
    """Why Triton could not load the group ``files`` (its metadata file: ``name``), or None when it can.

    A group that verifies as an entry but lacks what Triton reads would raise
    in every process that hits it (``KeyError: 'cubin'``): it is a miss.
    """
    import json

    if name not in files:
        return f"it holds no {name}"
    first_json = min(n for n in files if n.endswith(".json"))
    if first_json != name:
        return f"Triton would read {first_json} as its metadata, not {name}"
    try:
        meta = json.loads(files[name])
    except (ValueError, UnicodeDecodeError):
        return f"{name} is not JSON"
    target = meta.get("target") if isinstance(meta, dict) else None
    if not isinstance(target, dict) or not all(k in target for k in ("backend", "arch", "warp_size")):
        return f"{name} names no target (backend, arch, warp_size)"
    if not isinstance(meta.get("name"), str):
        return f"{name} names no kernel"
    binary = _BINARY_EXT.get(str(target["backend"]))
    suffixes = {n.rpartition(".")[2] for n in files if "." in n and not n.endswith(".json")}
    if binary is not None and binary not in suffixes:
        return f"it holds no .{binary} file (the {target['backend']} binary Triton loads)"
    for n, data in files.items():
        if n.endswith(".json") or (binary is not None and n.endswith("." + binary)):
            continue
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return f"{n} is not UTF-8 text (Triton reads it as text)"
    return None


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# Files on disk of this process: {name: (path, size, mtime_ns, inode)}. By payload
# digest (materialized once per content), and by kcache key: the groups this
# process read (verified) or published, served again without a store read
# while every file is unchanged (the local fast check of DESIGN.md rule 1).
_Sigs = dict[str, tuple[str, int, int, int]]
_materialized: dict[str, _Sigs] = {}
_by_key: dict[str, _Sigs] = {}


def _forget_after_fork() -> None:
    # The parent removes its run directory at exit: a child writes its own.
    global _lock, _run_lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork
    _run_lock = _thread.allocate_lock()
    _materialized.clear()
    _by_key.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def signatures(paths: Mapping[str, str]) -> _Sigs:
    out = {}
    for name, path in paths.items():
        st = os.stat(path, follow_symlinks=False)
        out[name] = (path, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def known(key_hex: str) -> dict[str, str] | None:
    # The hit path of every in-process compile: one dict read (atomic under the GIL) and
    # one lstat per file.
    sigs = _by_key.get(key_hex)
    if sigs is None or not _unchanged(sigs):
        return None
    return {name: v[0] for name, v in sigs.items()}


def _unchanged(files: _Sigs) -> bool:
    lstat = os.lstat
    for path, size, mtime, ino in files.values():
        try:
            st = lstat(path)
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime or st.st_ino != ino:
            return False
    return True


def write_new(cache_dir: str, files: Mapping[str, bytes], run_dir: _RunDir, prefix: str) -> dict[str, str]:
    """Writes ``files`` into a new directory of ``run_dir``; their paths.

    A directory removed while it is written (a cleaner) is made again, twice at
    most; a memory filesystem that refuses a write (full) sends this process's
    files to the cache directory from then on. Raises OSError when neither works.
    """
    for attempt in range(3):
        try:
            where = run_dir.fresh(cache_dir, prefix)
            out = {}
            for name, data in files.items():
                out[name] = path = os.path.join(where, name)
                write_file(path, data)
            return out
        except FileNotFoundError:
            if attempt == 2:
                raise
        except OSError:
            if not run_dir.memory:
                raise
            run_dir.to_disk()
    raise AssertionError("unreachable")


def materialize(cache_dir: str, key_hex: str, digest: str, files: dict[str, bytes], run_dir: _RunDir) -> dict[str, str]:
    """Paths of ``files`` in this process's run directory ``run_dir``, written once per content."""
    with _lock:
        have = _materialized.get(digest)
    if have is None or not _unchanged(have):
        paths = write_new(cache_dir, files, run_dir, "g")
        try:
            have = signatures(paths)
        except FileNotFoundError:  # removed between the write and the stat: write them again
            have = signatures(write_new(cache_dir, files, run_dir, "g"))
    with _lock:
        _materialized[digest] = have
        _by_key[key_hex] = have
    return {name: v[0] for name, v in have.items()}


def remember(key_hex: str, sigs: _Sigs) -> None:
    """Hand out the files ``sigs`` names for ``key_hex`` again while they are unchanged."""
    with _lock:
        _by_key[key_hex] = sigs


def forget() -> None:
    """Forget the groups this process handed out (another store is in use)."""
    with _lock:
        _by_key.clear()
