"""One process of test_torch.py: torch.compile (CPU Inductor) of a tiny model, forward and
backward, then one JSON line on stdout with what happened.

The environment says where the caches are (TORCHINDUCTOR_CACHE_DIR, TMPDIR, KCACHE_DIR,
KCACHE_REMOTE ...), and how kcache.torch is turned on: --activate install (kcache.torch.install()
after torch imports), env (KCACHE_TORCH=1 is set by the caller: kcache._autoload does it), none.

Counted in this process: ``lowerings`` (Inductor's fx_codegen_and_compile calls: a graph
compiled, not served), ``cpp_builds`` (host compiler runs), torch's own cache counters, and
kcache.torch.stats(). ``digest`` is the SHA-256 of the outputs and gradients, to compare
processes bit for bit.

    --go FILE        wait for FILE before compiling (a herd starts together)
    --stall FILE     at the first lowering write FILE and sleep 60 s (to be killed mid-compile)
    --variants LIST  after the model, compile a forward-only function under each change in
                     LIST (comma separated: base, shape, dtype, flag, version); report per variant
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--activate", choices=["install", "env", "none"], default="install")
    p.add_argument("--go")
    p.add_argument("--stall")
    p.add_argument("--variants", default="")
    p.add_argument("--model", choices=["mm", "mlp", "gpu", "none"], default="mm")
    p.add_argument("--threads", type=int, default=1, help="Inductor's compile_threads (1: no worker pool)")
    args = p.parse_args()
    caught: list[str] = []
    warnings.simplefilter("always")
    old_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        caught.append(f"{category.__name__}: {message}")
        old_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    import torch
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as iconfig
    from torch._dynamo.utils import counters
    from torch._inductor import cpp_builder

    iconfig.compile_threads = args.threads  # 1: no worker pool, the tests count compiles in this process
    triton_compiles = {"compiles": 0, "hits": 0}
    if args.model == "gpu":
        import triton

        def listen(**kw):  # type: ignore[no-untyped-def]
            triton_compiles["hits" if kw["cache_hit"] else "compiles"] += 1

        triton.knobs.compilation.listener = listen
    installed = None
    if args.activate == "install":
        import kcache.torch

        installed = kcache.torch.install()
    elif args.activate == "env":
        installed = "kcache.torch" in sys.modules and bool(sys.modules["kcache.torch"].installed())

    lowerings = 0
    real_codegen = compile_fx.fx_codegen_and_compile

    def counted_codegen(*a, **kw):  # type: ignore[no-untyped-def]
        nonlocal lowerings
        lowerings += 1
        if args.stall and lowerings == 1:
            with open(args.stall, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(60)
        return real_codegen(*a, **kw)

    compile_fx.fx_codegen_and_compile = counted_codegen
    builds = 0
    real_build = cpp_builder.CppBuilder.build

    def counted_build(self, *a, **kw):  # type: ignore[no-untyped-def]
        nonlocal builds
        builds += 1
        return real_build(self, *a, **kw)

    cpp_builder.CppBuilder.build = counted_build  # type: ignore[method-assign]
    if args.go:
        deadline = time.monotonic() + 120
        while not os.path.exists(args.go) and time.monotonic() < deadline:
            time.sleep(0.01)

    h = hashlib.sha256()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    if args.model == "mm":  # one extern call each way: graphs without a C++ kernel, quick to compile
        x = torch.randn(6, 8)
        w = torch.randn(8, 4, requires_grad=True)
        out = torch.compile(lambda a, b: a @ b)(x, w)
        out.square().sum().backward()
        tensors = [out, w.grad]
    elif args.model == "mlp":  # with C++ kernels (relu and its backward, a reduction)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        x = torch.randn(6, 8)
        out = torch.compile(model)(x)
        out.square().sum().backward()
        tensors = [out] + [prm.grad for prm in model.parameters()]
    elif args.model == "gpu":  # Triton kernels (pointwise and reductions), forward and backward
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                    torch.nn.Linear(256, 64)).cuda()
        x = torch.randn(128, 64, device="cuda")
        out = torch.compile(model)(x)
        out.square().sum().backward()
        torch.cuda.synchronize()
        tensors = [out] + [prm.grad for prm in model.parameters()]
    else:
        tensors = []
    for t in tensors:
        t = t.cpu() if t.is_cuda else t
        h.update(t.detach().contiguous().numpy().tobytes())
    compile_s = time.perf_counter() - t0

    variants = {}
    for v in [s for s in args.variants.split(",") if s]:
        before = (lowerings, counters["inductor"]["fxgraph_cache_miss"], counters["inductor"]["fxgraph_cache_hit"])
        torch._dynamo.reset()
        shape, dtype = (6, 8), torch.float32
        if v == "shape":
            shape = (7, 8)
        elif v == "dtype":
            dtype = torch.float64
        elif v == "flag":
            iconfig.size_asserts = not iconfig.size_asserts
        elif v == "version":
            from kcache.torch import _common

            _common.settings.torch_version += "+another"
        torch.manual_seed(1)
        a = torch.randn(*shape, dtype=dtype)
        y = torch.compile(lambda a: a @ a.T, dynamic=False)(a)
        variants[v] = {"lowerings": lowerings - before[0],
                       "fx_miss": counters["inductor"]["fxgraph_cache_miss"] - before[1],
                       "fx_hit": counters["inductor"]["fxgraph_cache_hit"] - before[2],
                       "sum": float(y.sum())}

    kstats = {}
    if "kcache.torch" in sys.modules:
        kstats = sys.modules["kcache.torch"].stats()
    print(json.dumps({
        "installed": installed,
        "lowerings": lowerings,
        "cpp_builds": builds,
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "fx_bypass": counters["inductor"]["fxgraph_cache_bypass"],
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "aot_miss": counters["aot_autograd"]["autograd_cache_miss"],
        "aot_saved": counters["aot_autograd"]["autograd_cache_saved"],
        "kstats": kstats,
        "digest": h.hexdigest(),
        "variants": variants,
        "compile_s": compile_s,
        "warnings": [w for w in caught if "kcache" in w],
        "triton": triton_compiles,
        "bundler": {k: v for k, v in counters["inductor"].items() if k.startswith("triton_bundler")},
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
