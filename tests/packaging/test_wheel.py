"""The portable wheel is the whole product (docs/install.md).

Installs the wheel that scripts/build-wheel.sh made ($KCACHE_WHEEL) into a
fresh venv and runs everything a user would, with LD_LIBRARY_PATH empty, the
working directory outside the checkout and, where the machine allows a mount
namespace (root, as in CI), the checkout's build/ directory hidden: the
native `kcache` command (a hit on a second compile), `kcache run` over an
NVRTC program (its second run compiles nothing), `kcache stamp` on an ONNX
model, the Python module with kcache.compile and kcache.triton.install(), and
then all of that again with the system CUDA toolkit hidden and NVIDIA's CUDA
wheels from PyPI in the venv. Also: `auditwheel show` gives a manylinux tag,
and every binary in the wheel needs only the policy's system libraries
besides what the wheel carries. No GPU is needed.

Run by scripts/test-python.sh, which builds the wheel and sets KCACHE_WHEEL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEEL = os.environ.get("KCACHE_WHEEL", "")
# NVIDIA's CUDA 13 wheels for the three libraries kcache loads (nvidia-cuda-nvcc
# brings nvidia-nvvm as a dependency; the libraries are what kcache needs).
NVIDIA_WHEELS = ["nvidia-cuda-nvrtc==13.*", "nvidia-nvjitlink==13.*", "nvidia-nvvm==13.*"]

pytestmark = pytest.mark.skipif(not WHEEL, reason="KCACHE_WHEEL is not set (scripts/test-python.sh sets it)")

KERNEL = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""

# An unmodified NVRTC program: it loads libnvrtc (by its soname, or by the
# path of NVIDIA's wheel, as cuda.pathfinder does) and compiles.
NVRTC_PROGRAM = r"""
import ctypes, sys
nvrtc = ctypes.CDLL(sys.argv[2])
prog = ctypes.c_void_p()
src = b'extern "C" __global__ void k(int* p) { p[0] = %d; }' % int(sys.argv[1])
assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, b"k.cu", 0, None, None) == 0
opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=sm_90")
assert nvrtc.nvrtcCompileProgram(prog, 1, opts) == 0
size = ctypes.c_size_t()
assert nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0 and size.value > 0
print("cubin", size.value)
"""

PYTHON_CHECK = r"""
import json, sys, warnings
import kcache, kcache.triton
src = sys.argv[1]
a = kcache.compile(src, arch="sm_90", name="axpy.cu")
b = kcache.compile(src, arch="sm_90", name="axpy.cu")
assert bytes(a.payload) == bytes(b.payload) and len(a.payload) > 0
with warnings.catch_warnings():
    warnings.simplefilter("error")
    kcache.triton.install()
kcache.triton.uninstall()
print(json.dumps({"version": kcache.__version__, "file": kcache.__file__,
                  "passport": a.passport}))
"""


def tiny_onnx_model() -> bytes:
    """A minimal ONNX ModelProto (ir_version 8, an empty graph "g", opset 17), encoded by hand."""
    graph = b"\x12\x01g"  # GraphProto.name = "g"
    opset = b"\x10\x11"  # OperatorSetIdProto.version = 17
    return b"\x08\x08" + b"\x3a" + bytes([len(graph)]) + graph + b"\x42" + bytes([len(opset)]) + opset


def can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


class Sandbox:
    """Runs commands in a fresh venv's world: a minimal environment, and, in a
    mount namespace where allowed, the given directories hidden behind empty ones."""

    def __init__(self, root: Path, venv: Path) -> None:
        self.root = root
        self.venv = venv
        self.hidden: list[Path] = []
        self.empty = root / "empty"
        self.empty.mkdir(exist_ok=True)
        self.env = {
            "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
            "HOME": str(root / "home"),
            "KCACHE_DIR": str(root / "cache"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "LD_LIBRARY_PATH": "",
            "LANG": "C.UTF-8",
            "TMPDIR": str(root),
        }

    def run(self, args: Sequence[str], env: dict[str, str] | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess[str]:
        full = dict(self.env, **(env or {}))
        cmd = list(args)
        if self.hidden:
            mounts = "".join(f'mount --bind "{self.empty}" "{d}" && ' for d in self.hidden)
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", mounts + 'exec "$@"', "sh", *cmd]
        return subprocess.run(cmd, env=full, cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def ok(self, args: Sequence[str], env: dict[str, str] | None = None) -> str:
        done = self.run(args, env)
        assert done.returncode == 0, f"{' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "--no-index", WHEEL], check=True)
    box = Sandbox(root, venv)
    if can_unshare() and (ROOT / "build").is_dir():
        box.hidden.append(ROOT / "build")  # the installed wheel must not need the build tree
    yield box
    shutil.rmtree(root, ignore_errors=True)  # the venv holds Triton and the CUDA wheels: ~1 GB


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def wheel_version() -> str:
    return Path(WHEEL).name.split("-")[1]


def test_command_is_native_and_versions_agree(sandbox: Sandbox) -> None:
    exe = sandbox.venv / "bin" / "kcache"
    assert exe.read_bytes()[:4] == b"\x7fELF", "the kcache command must be the native binary, not a script"
    assert sandbox.ok(["kcache", "--version"]).split()[-1] == wheel_version()
    out = sandbox.ok(["python", "-c", "import kcache; print(kcache.__version__, kcache.__file__)"]).split()
    assert out[0] == wheel_version()
    assert out[1].startswith(str(sandbox.venv)), out


def compile_twice(sandbox: Sandbox, tag: str, env: dict[str, str] | None = None) -> dict:
    src = sandbox.root / f"axpy_{tag}.cu"
    src.write_text(KERNEL + f"// {tag}\n")
    results = []
    for _ in range(2):
        results.append(json.loads(sandbox.ok(["kcache", "compile", str(src), "--arch", "sm_90", "--json",
                                              "-o", str(sandbox.root / f"axpy_{tag}.cubin")], env)))
    assert results[0]["hit"] is False and results[1]["hit"] is True, results
    return results[0]


def run_nvrtc_program_twice(sandbox: Sandbox, tag: str, env: dict[str, str] | None = None,
                            library: str = "libnvrtc.so.13") -> None:
    prog = sandbox.root / "nvrtc_program.py"
    prog.write_text(NVRTC_PROGRAM)
    log = sandbox.root / f"interpose_{tag}.log"
    run_env = dict(env or {}, KCACHE_INTERPOSE_LOG=str(log))
    seed = str(abs(hash(tag)) % 1000)
    sandbox.ok(["kcache", "run", "--", "python", str(prog), seed, library], run_env)
    assert log.read_text().count(" nvrtc compile ") == 1, log.read_text()
    log.unlink()
    sandbox.ok(["kcache", "run", "--", "python", str(prog), seed, library], run_env)
    text = log.read_text()
    assert " nvrtc hit " in text and " nvrtc compile " not in text, text


def test_compile_hits_on_the_second_run(sandbox: Sandbox) -> None:
    compile_twice(sandbox, "system")


def test_kcache_run_finds_its_stand_in_in_site_packages(sandbox: Sandbox) -> None:
    env = sandbox.ok(["kcache", "run", "--print-env"])
    stand_in = site_packages(sandbox.venv) / "kcache" / "libkcache-interpose.so"
    assert f"LD_PRELOAD='{stand_in}'" in env, env
    run_nvrtc_program_twice(sandbox, "system")


def test_stamp_an_onnx_model_with_the_command_and_the_module(sandbox: Sandbox) -> None:
    model = sandbox.root / "tiny.onnx"
    model.write_bytes(tiny_onnx_model())
    sandbox.ok(["kcache", "stamp", str(model)])
    shown = json.loads(sandbox.ok(["kcache", "inspect", str(model), "--json"]))
    assert "kcache" in json.dumps(shown), shown
    check = "import kcache.onnx, sys; s = kcache.onnx.verify(sys.argv[1]); print(s['key'])"
    assert len(sandbox.ok(["python", "-c", check, str(model)]).strip()) == 64


def test_python_module_compiles_and_installs_into_triton(sandbox: Sandbox) -> None:
    # Triton is a third-party package, installed here from the pip cache the
    # test venv filled; kcache.triton comes from the wheel.
    triton = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"],
                            capture_output=True, text=True)
    if triton.returncode != 0:
        pytest.skip("triton is not in the test venv")
    sandbox.ok(["python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                f"triton=={triton.stdout.strip()}"], {"HOME": os.environ.get("HOME", "/root")})
    src = sandbox.root / "axpy_py.cu"
    src.write_text(KERNEL + "// python\n")
    out = json.loads(sandbox.ok(["python", "-c", PYTHON_CHECK, src.read_text()]).splitlines()[-1])
    assert out["version"] == wheel_version()
    assert out["file"].startswith(str(sandbox.venv))


def hide_system_toolkit(sandbox: Sandbox) -> list[Path]:
    hidden = []
    for d in (Path("/usr/local/cuda"), Path("/usr/local/cuda").resolve()):
        if d.is_dir() and d not in hidden:
            hidden.append(d)
    return hidden


def test_nvidia_pypi_wheels_are_found_with_the_system_toolkit_hidden(sandbox: Sandbox) -> None:
    if not can_unshare():
        pytest.skip("hiding /usr/local/cuda needs a mount namespace (root)")
    sandbox.ok(["python", "-m", "pip", "install", "-q", "--disable-pip-version-check", *NVIDIA_WHEELS],
               {"HOME": os.environ.get("HOME", "/root")})
    hidden_before = list(sandbox.hidden)
    sandbox.hidden += hide_system_toolkit(sandbox)
    try:
        env = {"KCACHE_DIR": str(sandbox.root / "cache-pip")}
        # No toolkit on any path but the wheels': the loader finds no NVRTC either.
        probe = sandbox.run(["python", "-c", "import ctypes; ctypes.CDLL('libnvrtc.so.13')"], env)
        assert probe.returncode != 0 and "libnvrtc.so.13" in probe.stderr, probe.stderr
        nvrtc_version = sandbox.ok(["python", "-c", "import importlib.metadata as m; "
                                    "print(m.version('nvidia-cuda-nvrtc'))"], env).strip()
        major_minor = ".".join(nvrtc_version.split(".")[:2])
        first = compile_twice(sandbox, "pip", env)
        assert major_minor in json.dumps(first["passport"]), (major_minor, first["passport"])
        run_nvrtc_program_twice(sandbox, "pip", env,
                                str(site_packages(sandbox.venv) / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13"))
        src = sandbox.root / "axpy_pip_py.cu"
        src.write_text(KERNEL + "// pip python\n")
        # NVRTC, nvJitLink and NVVM, all three from the wheels (nothing else is left to find).
        nvvm_ir = re.search(r'NVVM_IR = """(.*?)"""', (ROOT / "python" / "tests" / "test_api.py").read_text(), re.S)
        assert nvvm_ir
        (sandbox.root / "kernel.ll").write_text(nvvm_ir.group(1))
        code = ("import json, kcache, sys\n"
                "a = kcache.compile(open(sys.argv[1]).read(), arch='sm_90', name='a.cu', target='ltoir', options=['-dlto'])\n"
                "c = kcache.link([a], arch='sm_90', lto=True)\n"
                "p = kcache.nvvm_compile(open(sys.argv[2]).read(), arch='compute_90')\n"
                "assert c.payload[:4] == b'\\x7fELF' and b'.entry kernel' in p.payload\n"
                "print(json.dumps([a.passport, c.passport]))")
        out = sandbox.ok(["python", "-c", code, str(src), str(sandbox.root / "kernel.ll")], env)
        assert out.count(f'"{major_minor}"') >= 2, out  # NVRTC's and nvJitLink's versions
        # Without the wheels, the error names what was searched.
        sandbox.ok(["python", "-m", "pip", "uninstall", "-q", "-y", "nvidia-cuda-nvrtc"])
        src.write_text(KERNEL + "// no toolkit\n")
        done = sandbox.run(["kcache", "compile", str(src), "--arch", "sm_90", "-o", "-"], env)
        assert done.returncode != 0 and "nvidia/cu13" in done.stderr, done.stderr
    finally:
        sandbox.hidden = hidden_before


def elf_files(directory: Path) -> list[Path]:
    out = []
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink():
            with p.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(p)
    return out


def policy_libraries(tag: str) -> set[str]:
    """The system libraries the manylinux policy `tag` allows (auditwheel's own table)."""
    import auditwheel.policy  # type: ignore[import-untyped, import-not-found, unused-ignore]

    table = json.loads((Path(auditwheel.policy.__file__).parent / "manylinux-policy.json").read_text())
    name = re.sub(r"_x86_64$", "", tag)
    for policy in table:
        if policy["name"] == name or name in policy.get("aliases", []):
            return set(policy["lib_whitelist"])
    raise AssertionError(f"{tag} is not in auditwheel's policy table")


def test_auditwheel_show_gives_a_manylinux_tag_and_ldd_only_policy_libraries(sandbox: Sandbox) -> None:
    auditwheel = Path(sys.executable).with_name("auditwheel")
    shown = subprocess.run([str(auditwheel), "show", WHEEL], capture_output=True, text=True, check=True).stdout
    m = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"(manylinux_2_\d+_x86_64)"', shown)
    assert m, shown
    tag = m.group(1)
    assert tag in Path(WHEEL).name, (tag, WHEEL)
    allowed = policy_libraries(tag) | {"linux-vdso.so.1", "ld-linux-x86-64.so.2"}
    site = site_packages(sandbox.venv)
    installed = [sandbox.venv / "bin" / "kcache", *elf_files(site / "kcache")]
    libs_dir = site / "kcache.libs"
    if libs_dir.is_dir():
        installed += elf_files(libs_dir)
    with zipfile.ZipFile(WHEEL) as z:
        in_wheel = {n for n in z.namelist() if n.endswith(".so") or ".so." in n or n.endswith("/kcache")}
    assert len(installed) >= 4 and len(in_wheel) >= 4, (installed, in_wheel)
    for binary in installed:
        ldd = sandbox.ok(["ldd", str(binary)])
        for line in ldd.splitlines():
            line = line.strip()
            if not line or line.startswith("statically linked"):
                continue
            assert "not found" not in line, f"{binary}: {line}"
            name = line.split()[0]
            target = os.path.normpath(line.split("=>")[1].split()[0]) if "=>" in line else name
            inside = libs_dir.is_dir() and target.startswith(str(libs_dir))
            assert inside or Path(name).name in allowed, f"{binary} needs {line}, outside {tag}'s policy"
