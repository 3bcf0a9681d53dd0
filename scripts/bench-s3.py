#!/usr/bin/env python3
"""S3 remote against curl --aws-sigv4 on the same SeaweedFS, in one run.

Starts `weed mini` (scripts/seaweedfs.sh installs it) on 127.0.0.1 and free
ports, then measures, as whole processes:
  1. a remote hit: `kcache pull KEY` on a new host (an empty cache
     directory: GET, verify in full, store locally) against a raw signed
     `curl --aws-sigv4 ... -o FILE` of the same object (and that GET followed
     by `sha256sum FILE`: the raw GET plus verification), for a small
     entry (cubin-like, 256 KiB by default), median of N runs each;
  2. a 300 MiB engine (incompressible): `kcache push` (multipart, 64 MiB
     parts) against `curl -T` (one signed PUT), and `kcache pull` against a
     signed curl GET; MB/s, and the peak RSS (ru_maxrss of each process)
     of kcache push / pull, of curl, and of `kcache pull` of a key the
     remote does not hold (the process's baseline), from GNU time
     (/usr/bin/time, Debian `time`). --large-mib 0 skips it.
Usage: scripts/bench-s3.py [--runs N] [--entry-kib K] [--large-mib M]
Prints one JSON object.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = os.path.join(ROOT, "build/ci/bin/kcache")
WEED = os.environ.get("KCACHE_WEED", os.path.join(ROOT, ".tools/seaweedfs/bin/weed"))
AK, SK, BUCKET = "benchAK", "benchSECRETkey", "kc-bench"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def timed(cmd, env=None):
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t


def timed_rss(cmd, env=None):
    """(seconds, peak RSS in KiB, exit code) of one process, from GNU time's %M.

    Not ru_maxrss from this script's own wait4: a child forked from Python
    starts with Python's resident pages counted (the kernel folds the
    pre-exec high-water mark in), which would hide anything below ~25 MiB.
    """
    rss_file = tempfile.mktemp(prefix="kcache-rss-")
    t = time.perf_counter()
    rc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file, *cmd], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    elapsed = time.perf_counter() - t
    with open(rss_file) as f:
        kib = int(f.read().strip().splitlines()[-1])
    os.unlink(rss_file)
    return elapsed, kib, rc


def timed_rc(cmd, env=None):
    """Like timed(), whatever the exit code."""
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--entry-kib", type=int, default=256)
    ap.add_argument("--large-mib", type=int, default=300)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kcache-bench-s3-")
    p = free_ports(10)
    with open(os.path.join(tmp, "s3.json"), "w") as f:
        json.dump({"identities": [{"name": "admin", "credentials": [{"accessKey": AK, "secretKey": SK}],
                                   "actions": ["Admin", "Read", "Write", "List"]}]}, f)
    os.makedirs(os.path.join(tmp, "data"))
    weed = subprocess.Popen(
        [WEED, "mini", "-dir=" + os.path.join(tmp, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         f"-master.port={p[0]}", f"-master.port.grpc={p[1]}", f"-volume.port={p[2]}", f"-volume.port.grpc={p[3]}",
         f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}", f"-s3.port={p[6]}", f"-s3.port.grpc={p[7]}",
         f"-admin.port={p[8]}", f"-admin.port.grpc={p[9]}", "-s3.port.iceberg=0", "-s3.port.lance=0",
         "-admin.ui=false", "-webdav=false", "-s3.config=" + os.path.join(tmp, "s3.json"), "-bucket=" + BUCKET],
        stdout=open(os.path.join(tmp, "weed.log"), "w"), stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{p[6]}"
    sig = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{AK}:{SK}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    try:
        for _ in range(600):
            r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-I", *sig,
                                f"{endpoint}/{BUCKET}"], capture_output=True, text=True)
            if r.stdout == "200":
                break
            time.sleep(0.05)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, KCACHE_FSYNC="none",
                   KCACHE_REMOTE=f"s3://{BUCKET}/bench?endpoint={endpoint}&max_entry_size=1g&timeout_ms=120000")
        for v in ("KCACHE_DIR", "KCACHE_REMOTE_KEY_FILE", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(v, None)
        entry = os.path.join(tmp, "entry")
        with open(entry, "wb") as f:  # cubin-like: half random, half structured
            half = a.entry_kib * 512
            f.write(os.urandom(half) + bytes(i % 251 for i in range(half)))
        src = dict(env, KCACHE_DIR=os.path.join(tmp, "src"))
        key = subprocess.run([K, "put", entry], env=src, check=True, capture_output=True, text=True).stdout[:64]
        subprocess.run([K, "push", key], env=src, check=True, capture_output=True)
        obj = f"{endpoint}/{BUCKET}/bench/kcache/v1/{key}"
        out = os.path.join(tmp, "out")
        hit, raw, raw_verified = [], [], []
        for i in range(a.runs):  # interleaved, so that drift hits both alike
            host = dict(env, KCACHE_DIR=os.path.join(tmp, f"host{i}"))
            hit.append(timed([K, "pull", key], host))
            raw.append(timed(["curl", "-s", "-f", *sig, "-o", out, obj]))
            # The baseline, "the raw GET plus verification": the same GET,
            # then the object's SHA-256 checked by a second process (sha256sum).
            raw_verified.append(raw[-1] + timed(["sha256sum", out]))
        # The fixed cost of each side, without the server: an endpoint that
        # refuses connections (kcache: process start, cache directory, libcurl
        # loaded and initialised, one warning; curl: its start with libcurl).
        dead = f"http://127.0.0.1:{free_ports(1)[0]}"
        fixed_k, fixed_c = [], []
        for i in range(a.runs):
            fixed_k.append(timed_rc([K, "pull", key], dict(env, KCACHE_DIR=os.path.join(tmp, f"dead{i}"),
                                                          KCACHE_REMOTE=f"s3://{BUCKET}/bench?endpoint={dead}")))
            fixed_c.append(timed_rc(["curl", "-s", *sig, "-o", out, f"{dead}/{BUCKET}/x"]))
        ms = lambda xs: round(statistics.median(xs) * 1e3, 2)
        res = {"entry_kib": a.entry_kib, "runs": a.runs, "kcache_hit_ms": ms(hit), "curl_get_ms": ms(raw),
               "kcache_refused_ms": ms(fixed_k), "curl_refused_ms": ms(fixed_c)}
        res["hit_over_curl"] = round(res["kcache_hit_ms"] / res["curl_get_ms"], 2)
        res["curl_get_sha256sum_ms"] = ms(raw_verified)
        res["hit_over_curl_sha256sum"] = round(res["kcache_hit_ms"] / res["curl_get_sha256sum_ms"], 2)

        if a.large_mib > 0:
            big = os.path.join(tmp, "engine")
            n = a.large_mib << 20
            with open(big, "wb") as f:
                for _ in range(a.large_mib):
                    f.write(os.urandom(1 << 20))
            bsrc = dict(env, KCACHE_DIR=os.path.join(tmp, "bigsrc"))
            bdst = dict(env, KCACHE_DIR=os.path.join(tmp, "bigdst"))
            bkey = subprocess.run([K, "put", big], env=bsrc, check=True, capture_output=True, text=True).stdout[:64]
            push, push_rss, rc = timed_rss([K, "push", bkey], bsrc)
            assert rc == 0, "kcache push failed"
            curl_put, curl_put_rss, _ = timed_rss(["curl", "-s", "-f", *sig, "-T", big, f"{endpoint}/{BUCKET}/raw/engine"])
            _, base_rss, _ = timed_rss([K, "pull", "0" * 64], bdst)
            pull, pull_rss, rc = timed_rss([K, "pull", bkey], bdst)
            assert rc == 0, "kcache pull failed"
            curl_get, curl_get_rss, _ = timed_rss(["curl", "-s", "-f", *sig, "-o", out, f"{endpoint}/{BUCKET}/raw/engine"])
            mb = n / 1e6
            mib = lambda kib: round(kib / 1024, 1)
            res.update({"large_mib": a.large_mib,
                        "kcache_push_MBps": round(mb / push, 1), "curl_put_MBps": round(mb / curl_put, 1),
                        "kcache_pull_MBps": round(mb / pull, 1), "curl_get_MBps": round(mb / curl_get, 1),
                        "kcache_push_peak_rss_MiB": mib(push_rss), "kcache_pull_peak_rss_MiB": mib(pull_rss),
                        "kcache_baseline_rss_MiB": mib(base_rss),
                        "curl_put_peak_rss_MiB": mib(curl_put_rss), "curl_get_peak_rss_MiB": mib(curl_get_rss)})
        print(json.dumps(res, indent=2))
    finally:
        weed.kill()
        weed.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
