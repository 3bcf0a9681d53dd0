#!/usr/bin/env python3
"""Exact (not windowed) LRU, GreedyDual-Size and GreedyDual-Size-Frequency on the
eviction trace of bench_eviction_trace (issue 21): the upper bound a per-byte
cost policy can reach on recorded build times, without kcache's sampling.

  python3 bench/eviction_policy_sim.py bench/data/nvrtc_kernel_mix.json          # every kind, equal shares
  python3 bench/eviction_policy_sim.py bench/data/nvrtc_compile_costs.json corpus  # 70/20/10 corpus mix

Same shape as tests/support/eviction_trace.hpp (4000 kernels, 80000 Zipf requests
over a random order of the kernels, cap = a share of the catalogue's bytes with a
900-byte passport each; Python's RNG, so not the same draw). Prints, per Zipf
exponent and cap, lru's rebuild time after first use and lru / policy.
"""
import bisect
import heapq
import json
import random
import sys
def trace(path, zipf, mix=None, N=4000, R=80000, PASS=900):
    data = json.load(open(path))['compiles']
    kinds = []
    for c in data:
        if c['kind'] not in kinds: kinds.append(c['kind'])
    shares = mix or [(k, 1/len(kinds)) for k in kinds]
    by = {k: [c for c in data if c['kind'] == k] for k in kinds}
    rng = random.Random(21); kern = []; used = {k: 0 for k in kinds}
    for i in range(N):
        x = (i + .5) / N; acc = 0
        for k, sh in shares:
            acc += sh
            if x < acc: break
        c = by[k][used[k] % len(by[k])]; used[k] += 1
        kern.append((c['compile_us'], c['cubin_bytes'] + PASS))
    order = list(range(N)); rng.shuffle(order)
    cdf = []; s = 0
    for r in range(N):
        s += 1 / (r + 1) ** zipf; cdf.append(s)
    reqs = [order[min(bisect.bisect_left(cdf, rng.uniform(0, s)), N - 1)] for _ in range(R)]
    return kern, reqs
def run(kern, reqs, cap, policy, stats=None):
    """Rebuild time after first use of policy 'lru', 'gds' or 'gdsf' on
    requests reqs over kernels kern [(cost, bytes)] under cap bytes; stats, a
    dict, also gets the misses (first ones included)."""
    inc = {}; h = []; size = 0; L = 0.0; t = 0; seen = set(); warm = 0; misses = 0
    for i in reqs:
        t += 1; cst, b = kern[i]
        if i in inc:
            n = inc[i][1] + 1
            pr = t if policy == 'lru' else L + (n if policy == 'gdsf' else 1) * cst / b
            inc[i] = (pr, n); heapq.heappush(h, (pr, i)); continue
        misses += 1
        if i in seen: warm += cst
        seen.add(i)
        while size + b > cap and inc:
            pr, v = heapq.heappop(h)
            if v not in inc or inc[v][0] != pr: continue
            if policy != 'lru': L = pr
            size -= kern[v][1]; del inc[v]
        pr = t if policy == 'lru' else L + cst / b
        inc[i] = (pr, 1); heapq.heappush(h, (pr, i)); size += b
    if stats is not None: stats['misses'] = misses
    return warm
def main():
    path = sys.argv[1]
    mix = None
    if len(sys.argv) > 2 and sys.argv[2] == 'corpus': mix = [('trivial', .7), ('medium', .2), ('heavy_cub', .1)]
    for z in (0.6, 0.8, 1.0):
        kern, reqs = trace(path, z, mix)
        tot = sum(b for _, b in kern)
        for capp in (10, 25, 50):
            r = {p: run(kern, reqs, tot * capp / 100, p) for p in ('lru', 'gds', 'gdsf')}
            print(f"zipf {z} cap {capp}%: lru {r['lru']/1e6:8.0f} s  gds {r['lru']/r['gds']:.2f}x  gdsf {r['lru']/r['gdsf']:.2f}x")
if __name__ == '__main__':
    main()
