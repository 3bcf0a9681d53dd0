#!/usr/bin/env python3
"""A remote hit into an empty cache directory against one into a warm one (issue 18 item 9).

Starts its own redis-server on 127.0.0.1 and a free port (stopped by pid at the end), fills
the remote with one cold `kcache compile` of bench/corpus/trivial.cu, and makes a "warm"
template: that cache directory with its entries removed (memos, counters and check table
kept). Then, in turns, it times whole `kcache compile` processes that hit the remote:
  empty  a cache directory that does not exist yet (a CI runner's first compile)
  warm   a fresh copy of the warm template (made before the clock starts)
  local  a local hit in the warm directory (for scale)
  fresh  an empty cache directory of a user whose per-user toolkit memo is empty too
         ($XDG_CACHE_HOME new: a machine's very first kcache run, which loads NVRTC once)
and prints the median of each, their ratio (of the medians, and the median of the per-round
ratios), the CPU time (user + system, which the machine's load inflates less than wall time)
of the empty and warm runs, and what the empty directory holds afterwards.

Usage: scripts/bench-remote-empty-dir.py [rounds]   (after building the release preset)
"""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KCACHE = os.environ.get("KCACHE_BIN", os.path.join(ROOT, "build/release/bin/kcache"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def du_kib(path):
    total = 0
    for base, dirs, files in os.walk(path):
        for name in dirs + files + ([] if base != path else []):
            total += os.lstat(os.path.join(base, name)).st_blocks * 512
    return (total + os.lstat(path).st_blocks * 512) // 1024


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    work = tempfile.mkdtemp(prefix="kcache-remote-empty-")
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        os.makedirs(os.path.join(work, "src"))
        os.makedirs(os.path.join(work, "out"))
        src = os.path.join(work, "src", "trivial.cu")
        shutil.copy(os.path.join(ROOT, "bench/corpus/trivial.cu"), src)
        env = dict(os.environ, KCACHE_REMOTE=f"redis://127.0.0.1:{port}")
        env.pop("KCACHE_DISABLE", None)

        cpu = {}  # CPU time (user + system) of the last run per cache directory, ms

        def run(cache_dir, out, xdg=None):
            e = dict(env, KCACHE_DIR=cache_dir)
            if xdg:
                e["XDG_CACHE_HOME"] = xdg
            t = time.perf_counter()
            p = subprocess.Popen([KCACHE, "compile", src, "--target", "cubin", "--arch", "sm_90", "-o", out],
                                 env=e, stdout=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            wall = (time.perf_counter() - t) * 1e3
            p.returncode = os.waitstatus_to_exitcode(status)
            assert p.returncode == 0, f"kcache compile exited {p.returncode}"
            cpu[cache_dir if xdg is None else "fresh"] = (ru.ru_utime + ru.ru_stime) * 1e3
            return wall

        seed = os.path.join(work, "seed")
        run(seed, os.path.join(work, "out", "seed.cubin"))  # the cold compile: fills the remote
        time.sleep(0.5)
        warm = os.path.join(work, "warm-template")
        shutil.copytree(seed, warm, symlinks=True)
        shutil.rmtree(os.path.join(warm, "v1", "entries"))
        os.mkdir(os.path.join(warm, "v1", "entries"), 0o700)
        time.sleep(2.5)  # let the source's timestamps age past the header scanner's racy window
        times = {"empty": [], "warm": [], "local": [], "fresh": []}
        cpus = {"empty": [], "warm": []}
        pairs = []  # empty / warm wall time, per round (the two runs are next to each other)
        empty = os.path.join(work, "empty")
        copy = os.path.join(work, "warm")
        for _ in range(rounds):
            shutil.rmtree(empty, ignore_errors=True)
            times["empty"].append(run(empty, os.path.join(work, "out", "empty.cubin")))
            cpus["empty"].append(cpu[empty])
            empty_kib = du_kib(empty)
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(warm, copy, symlinks=True)
            times["warm"].append(run(copy, os.path.join(work, "out", "warm.cubin")))
            cpus["warm"].append(cpu[copy])
            pairs.append(times["empty"][-1] / times["warm"][-1])
            times["local"].append(run(copy, os.path.join(work, "out", "local.cubin")))
            xdg = os.path.join(work, "xdg")
            shutil.rmtree(xdg, ignore_errors=True)
            shutil.rmtree(empty, ignore_errors=True)
            times["fresh"].append(run(empty, os.path.join(work, "out", "fresh.cubin"), xdg))
        with open(os.path.join(work, "out", "seed.cubin"), "rb") as a, \
                open(os.path.join(work, "out", "empty.cubin"), "rb") as b:
            assert a.read() == b.read(), "the remote hit returned other bytes"
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"remote hit, empty cache directory: {med['empty']:7.2f} ms (median of {rounds})")
        print(f"remote hit, warm cache directory:  {med['warm']:7.2f} ms")
        print(f"local hit (for scale):             {med['local']:7.2f} ms")
        print(f"remote hit, empty dir, new user:   {med['fresh']:7.2f} ms (no toolkit memo either: NVRTC loaded once)")
        print(f"empty / warm: {med['empty'] / med['warm']:.2f}x (medians); {statistics.median(pairs):.2f}x (median of "
              f"the {rounds} paired rounds)")
        ce, cw = statistics.median(cpus["empty"]), statistics.median(cpus["warm"])
        print(f"CPU time (user + system), empty / warm: {ce:.2f} / {cw:.2f} ms = {ce / cw:.2f}x")
        print(f"the empty directory after one remote hit: {empty_kib} KiB (du)")
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
