#!/usr/bin/env python3
"""Lower bounds on the rebuild time of EVERY eviction policy on the eviction trace of
bench_eviction_trace (issue 21): offline (policies that know the future included) and
online (every policy a cache can run, one that knows each kernel's popularity included),
and how close LRU, exact GDSF, an LFU-by-cost with counts that outlive eviction and two
offline heuristics come to them. Results: docs/performance.md, "The store at its limits";
every run: docs/history/performance-store.md, "What any policy could reach".

  python3 -m venv .venv-bench && .venv-bench/bin/pip install scipy numpy
  .venv-bench/bin/python bench/eviction_bound.py                        # the issue's setting: Zipf 0.8, cap 25 %
  .venv-bench/bin/python bench/eviction_bound.py --sweep                # Zipf 0.6/0.8/1.0 x caps 10/25/50 %
  .venv-bench/bin/python bench/eviction_bound.py --store-json LRU.json --store-json COST.json
      # also compare with the real FileStore's replay: the JSON of
      # KCACHE_BENCH_DIR=/dev/shm build/ci/bench/bench_eviction_trace --benchmark_format=json
      #   --benchmark_filter='BM_EvictionTrace/[01]/'

The trace is the C++ bench's own: `bench_eviction_trace dump-trace DATA` (same kernels,
recorded NVRTC build times and cubin sizes, Zipf, seed 21, 80 000 requests, cap, with
KCACHE_BENCH_ZIPF / KCACHE_BENCH_CAP_PERCENT for the sweep). Each entry weighs its cubin
plus one passport, as in the store.

The bound. A policy's rebuild time is the cold misses (first request of each kernel, paid
by every policy) plus, for each pair of consecutive requests of a kernel at t < t', its
build time unless the kernel stays cached from t to t'. Keeping it takes its bytes over the
states t..t'-1; at every state the kept bytes are at most the cap. Relaxing "kept" to a
fraction z in [0, size] gives a linear program whose matrix has consecutive ones: a min-cost
flow along the time line (arc t -> t+1 of capacity cap, the free room; arc t -> t' of
capacity size, cost -build_time/size per byte, per interval). Its optimum (HiGHS) is at most
what any policy saves, so "cold + all repeat costs - LP savings" is a lower bound on every
policy's total. The bound is certified by a dual solution y >= 0 (one price per state):
savings <= cap * sum(y) + sum_i size_i * max(0, w_i - sum of y over i), checked here in
numpy independently of the solver. Upper bounds on the offline optimum: the LP solution
rounded down to the intervals it keeps whole (plus a greedy fill), and a Belady-style
policy that evicts (or does not admit) the entry with the lowest build time per byte per
request-step until its next use. A self-check on small random traces first compares the
LP with the exact offline optimum (dynamic programming over every cached set).

The online bound (online_bound below) uses that the trace's requests are independent Zipf
draws: the expected cost of request t, given what a policy holds, is at least the least
expected miss cost of any set of already-seen kernels that fits the cap.

Exit status: 0; 1 when the LP is not solved to optimality, the dual certificate does not
match it, an upper bound falls below the bound, or the LRU totals of this script disagree
with the C++ bench's (exactly with its exact LRU; the FileStore's cold misses exactly, its
sampled LRU total within 5 %); 2 on bad arguments.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eviction_policy_sim import run as sim_run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_NAMES = {0: 'corpus', 1: 'corpus_shuffled', 2: 'mix'}


def fail(msg):
    print(f"eviction_bound: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def dump_trace(bench, data, zipf, cap_percent):
    env = dict(os.environ, KCACHE_BENCH_ZIPF=str(zipf), KCACHE_BENCH_CAP_PERCENT=str(cap_percent))
    out = subprocess.run([bench, 'dump-trace', str(data)], env=env, check=True, capture_output=True, text=True,
                         cwd=ROOT)
    return json.loads(out.stdout)


class Trace:
    def __init__(self, j):
        self.j = j
        self.cap = j['cap_bytes']
        self.cost = np.array([k[1] for k in j['kernels']], dtype=np.float64) / 1e6          # s
        self.size = np.array([k[2] + j['pass_bytes'] for k in j['kernels']], dtype=np.int64)
        self.req = np.array(j['requests'], dtype=np.int64)
        self.kind = [k[0] for k in j['kernels']]
        n = len(self.req)
        # nxt[t]: the next request of the kernel of request t (n: none); the intervals
        # (a, b) of consecutive requests, a kept kernel taking its bytes over states a..b-1.
        nxt = np.full(n, n, dtype=np.int64)
        last = {}
        for t in range(n - 1, -1, -1):
            k = int(self.req[t])
            nxt[t] = last.get(k, n)
            last[k] = t
        self.nxt = nxt
        self.first = np.ones(n, dtype=bool)
        self.first[nxt[nxt < n]] = False
        self.cold_s = float(self.cost[self.req[self.first]].sum())
        has = nxt < n
        self.ia = np.nonzero(has)[0]
        self.ib = nxt[has]
        self.ik = self.req[has]
        self.repeat_s = float(self.cost[self.ik].sum())   # every repeat request missed


def check_lru(tr):
    """Exact LRU (eviction_policy_sim.run) must give the C++ exact LRU's totals."""
    kern = [(int(c), int(s)) for c, s in zip(np.rint(tr.cost * 1e6), tr.size)]
    st = {}
    warm_us = sim_run(kern, [int(r) for r in tr.req], tr.cap, 'lru', st)
    e = tr.j['exact_lru']
    if st['misses'] != e['misses'] or warm_us != e['rebuild_us'] - e['cold_us'] or \
            round(tr.cold_s * 1e6) != e['cold_us']:
        fail(f"LRU disagrees with the C++ bench's exact LRU: misses {st['misses']} vs {e['misses']}, "
             f"after first use {warm_us} vs {e['rebuild_us'] - e['cold_us']} us, cold {tr.cold_s * 1e6:.0f} vs "
             f"{e['cold_us']} us")
    gdsf_us = sim_run(kern, [int(r) for r in tr.req], tr.cap, 'gdsf')
    return warm_us / 1e6, gdsf_us / 1e6


def lp_bound(tr):
    """The LP relaxation as a min-cost flow, solved by HiGHS. Returns (saved_s, z) with z the kept
    bytes per interval, after checking feasibility and a dual certificate."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix
    n = len(tr.req)
    m = len(tr.ia)
    unit = 1024.0                        # KiB, for the solver's tolerances
    s = tr.size[tr.ik] / unit
    w = tr.cost[tr.ik] / s               # s per KiB kept over the interval
    cap = tr.cap / unit
    # arcs: n time arcs t -> t+1, then m interval arcs a -> b; rows: nodes 0..n
    tail = np.concatenate([np.arange(n), tr.ia])
    head = np.concatenate([np.arange(1, n + 1), tr.ib])
    cols = np.arange(n + m)
    a_eq = csr_matrix((np.concatenate([np.ones(n + m), -np.ones(n + m)]),
                       (np.concatenate([tail, head]), np.concatenate([cols, cols]))), shape=(n + 1, n + m))
    b_eq = np.zeros(n + 1)
    b_eq[0], b_eq[n] = cap, -cap
    c = np.concatenate([np.zeros(n), -w])
    bounds = np.column_stack([np.zeros(n + m), np.concatenate([np.full(n, cap), s])])
    res = linprog(c, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method='highs-ds')
    if res.status != 0:
        fail(f"the LP was not solved: {res.message}")
    z = np.clip(res.x[n:], 0, s)
    saved = float(w @ z)
    # Feasibility, independently: kept KiB per state <= cap.
    cover = np.zeros(n + 1)
    np.add.at(cover, tr.ia, z)
    np.add.at(cover, tr.ib, -z)
    if np.cumsum(cover)[:n].max() > cap * (1 + 1e-7):
        fail("the LP solution exceeds the cap")
    # Dual certificate: any y >= 0 per state bounds the savings from above.
    p = res.eqlin.marginals
    best = None
    for y in (np.maximum(0, p[:-1] - p[1:]), np.maximum(0, p[1:] - p[:-1])):
        pref = np.concatenate([[0.0], np.cumsum(y)])
        d = cap * pref[-1] + float(s @ np.maximum(0, w - (pref[tr.ib] - pref[tr.ia])))
        best = d if best is None else min(best, d)
    if best > saved * (1 + 1e-6) + 1e-6 or best < saved * (1 - 1e-6) - 1e-6:
        fail(f"the dual certificate ({best:.3f} s) does not match the LP's savings ({saved:.3f} s)")
    return best, z * unit


def rounded_lp(tr, z):
    """An integral offline policy from the LP: keep the intervals the LP keeps whole, then
    greedily (best build time per byte first) those that still fit. Returns its rebuild time
    after first use and the number of fractional intervals."""
    n = len(tr.req)
    s = tr.size[tr.ik].astype(np.float64)
    keep = z >= s * (1 - 1e-9)
    frac = np.nonzero((z > 1e-9) & ~keep)[0]
    cover = np.zeros(n + 1)
    np.add.at(cover, tr.ia[keep], s[keep])
    np.add.at(cover, tr.ib[keep], -s[keep])
    cover = np.cumsum(cover)[:n]
    if cover.max() > tr.cap:
        fail("the rounded LP solution exceeds the cap")
    w = tr.cost[tr.ik] / s
    for i in frac[np.argsort(-w[frac])]:
        a, b = tr.ia[i], tr.ib[i]
        if cover[a:b].max() + s[i] <= tr.cap:
            cover[a:b] += s[i]
            keep[i] = True
    return tr.repeat_s - float(tr.cost[tr.ik][keep].sum()), len(frac)


def belady_cost(tr):
    """Offline: on a miss that does not fit, drop (or do not admit) the entries with the lowest
    build time / (bytes x requests until next use), never-used-again first."""
    n = len(tr.req)
    nk = len(tr.cost)
    cached = np.zeros(nk, dtype=bool)
    nxt_of = np.full(nk, n, dtype=np.float64)
    used = 0
    warm = 0.0
    seen = np.zeros(nk, dtype=bool)
    size = tr.size
    for t in range(n):
        k = tr.req[t]
        nxt_of[k] = tr.nxt[t]
        if cached[k]:
            continue
        if seen[k]:
            warm += tr.cost[k]
        seen[k] = True
        if tr.nxt[t] >= n:
            continue                      # never requested again: not admitted
        cached[k] = True
        used += size[k]
        if used <= tr.cap:
            continue
        cand = np.nonzero(cached)[0]
        dist = nxt_of[cand] - t
        pri = np.where(nxt_of[cand] >= n, -1.0, tr.cost[cand] / (size[cand] * dist))
        for v in cand[np.argsort(pri, kind='stable')]:
            cached[v] = False
            used -= size[v]
            if used <= tr.cap:
                break
    return warm


def online_bound(tr):
    """The requests are independent draws from the kernels' popularity p (Zipf). Whatever an
    online policy does, the set S_t it holds before request t (under the cap) is fixed by the
    requests before t and holds only kernels requested before t (Seen_t), so request t misses
    with expected cost sum_{k not in S_t} p_k c_k >= V(Seen_t), the least such cost over every
    set of seen kernels that fits the cap (at least its fractional knapsack, best p_k c_k per
    byte first). Summed over t: E[total of ANY online policy] >= E[sum_t V(Seen_t)], Seen_t being
    the same for every policy; one that knows p included, first misses in. Returns
    sum_t V(Seen_t) on this trace (an unbiased estimate of that bound), the realized total of the
    static policy that knows p and admits only the greedy knapsack set, and the standard
    deviation of a static policy's total (its requests are independent) as the noise scale."""
    p = np.array([k[3] for k in tr.j['kernels']], dtype=np.float64)
    if abs(p.sum() - 1) > 1e-9:
        fail(f"the popularity does not sum to 1 ({p.sum()})")
    pc = p * tr.cost
    order = np.argsort(-pc / tr.size, kind='stable')
    n = len(tr.req)

    def least_expected_cost(seen):
        """min over sets S of seen kernels that fit the cap of sum_{k not in S} p_k c_k,
        relaxed to a fractional knapsack (so at most the true minimum)."""
        m = seen[order]
        cs = np.cumsum(np.where(m, tr.size[order], 0))
        whole = m & (cs <= tr.cap)
        kept = pc[order][whole].sum()
        nxt = np.nonzero(m & (cs > tr.cap))[0]
        if len(nxt):
            j = nxt[0]
            kept += pc[order][j] * (tr.cap - (cs[j] - tr.size[order][j])) / tr.size[order][j]
        return float(pc.sum() - kept)

    # Only kernels requested before t can be cached at t: sum over t of the least expected cost
    # given the kernels seen before t (it changes only at first requests).
    seen = np.zeros(len(p), dtype=bool)
    firsts = np.nonzero(tr.first)[0]
    bound = float(pc.sum())             # request 0: nothing seen yet
    for e, t in enumerate(firsts):      # requests t+1 .. the next first request have seen req[t]
        seen[tr.req[t]] = True
        upto = firsts[e + 1] if e + 1 < len(firsts) else n - 1
        bound += (upto - t) * least_expected_cost(seen)
    inset = np.zeros(len(p), dtype=bool)
    room = tr.cap
    for k in order:
        if tr.size[k] <= room:
            inset[k] = True
            room -= tr.size[k]
    miss = ~inset[tr.req] | tr.first
    static = float(tr.cost[tr.req][miss].sum())
    per = np.where(inset, 0.0, tr.cost)
    sd = float(np.sqrt(n * ((p * per ** 2).sum() - (p * per).sum() ** 2)))
    return bound, static, sd


def lfu_cost(tr):
    """Online: GDSF without aging, whose counts outlive eviction (every past request of a
    kernel counts, as a TinyLFU-style history would keep them): on a miss that does not fit,
    drop (or do not admit) the entries with the least uses x build time / bytes. Under
    independent requests the counts converge to the popularity, so this approaches the static
    policy that knows it. Returns its total, first misses included."""
    import heapq
    n = len(tr.req)
    nk = len(tr.cost)
    uses = np.zeros(nk, dtype=np.int64)
    cached = np.zeros(nk, dtype=bool)
    dens = tr.cost / tr.size
    h = []
    used = 0
    total = 0.0
    for t in range(n):
        k = int(tr.req[t])
        uses[k] += 1
        pr = uses[k] * dens[k]
        if cached[k]:
            heapq.heappush(h, (pr, k))
            continue
        total += tr.cost[k]
        cached[k] = True
        used += tr.size[k]
        heapq.heappush(h, (pr, k))
        while used > tr.cap:
            q, v = heapq.heappop(h)
            if not cached[v] or q != uses[v] * dens[v]:
                continue
            cached[v] = False
            used -= tr.size[v]
    return total


def exact_opt(tr):
    """The offline optimum by dynamic programming over every cached set (small traces only):
    after each request the cache may hold any subset of what it held plus the requested
    kernel that fits the cap. Total, first misses included."""
    nk = len(tr.cost)
    full = 1 << nk
    sizes = np.array([sum(int(tr.size[i]) for i in range(nk) if m >> i & 1) for m in range(full)])
    fits = sizes <= tr.cap
    dist = np.full(full, np.inf)
    dist[0] = 0.0
    masks = np.arange(full)
    for k in tr.req:
        bit = 1 << int(k)
        g = np.full(full, np.inf)
        step = dist + np.where(masks & bit, 0.0, tr.cost[k])
        np.minimum.at(g, masks | bit, step)
        for i in range(nk):            # g[T] = min over supersets U of T (T a subset of S + k)
            has = (masks >> i & 1) == 1
            g[masks[~has]] = np.minimum(g[masks[~has]], g[masks[~has] | (1 << i)])
        dist = np.where(fits, g, np.inf)
    return float(dist.min())


def self_check(instances=30, seed=21):
    """On small random traces: LP bound <= exact offline optimum <= the offline heuristics and
    LRU. Fails when not: the bound (or its certificate) would be wrong."""
    rng = np.random.default_rng(seed)
    for _ in range(instances):
        nk = int(rng.integers(3, 9))
        sizes = rng.integers(1, 6, nk) * 1000
        p = rng.random(nk) + 0.05
        p /= p.sum()
        j = {'cap_bytes': int(rng.integers(int(sizes.max()), int(sizes.sum()))), 'pass_bytes': 0,
             'kernels': [['k', int(rng.integers(1, 5_000_000)), int(sz), float(pk)] for sz, pk in zip(sizes, p)],
             'requests': [int(x) for x in rng.choice(nk, size=int(rng.integers(10, 40)), p=p)]}
        tr = Trace(j)
        opt = exact_opt(tr)
        saved, z = lp_bound(tr)
        lp = tr.repeat_s - saved + tr.cold_s
        others = {'rounded LP': rounded_lp(tr, z)[0] + tr.cold_s, 'Belady-cost': belady_cost(tr) + tr.cold_s}
        kern = [(int(c), int(sz)) for c, sz in zip(np.rint(tr.cost * 1e6), tr.size)]
        others['lru'] = sim_run(kern, [int(r) for r in tr.req], tr.cap, 'lru') / 1e6 + tr.cold_s
        if lp > opt * (1 + 1e-6) + 1e-6:
            fail(f"self-check: the LP bound {lp:.6f} s exceeds the exact optimum {opt:.6f} s on {j}")
        for name, v in others.items():
            if v < opt * (1 - 1e-6) - 1e-6:
                fail(f"self-check: {name} {v:.6f} s is below the exact optimum {opt:.6f} s on {j}")
    print(f"self-check: LP bound <= exact offline optimum <= rounded LP, Belady-cost, LRU on {instances} "
          "small random traces")


def store_rows(paths):
    rows = {}
    for p in paths:
        for b in json.load(open(p))['benchmarks']:
            parts = b['name'].split('/')
            if parts[0] == 'BM_EvictionTrace':
                rows[(int(parts[1]), int(parts[2]))] = b
    return rows


def analyse(tr, data, store):
    """Every figure of one trace, in s of rebuild time, first misses included."""
    c = tr.cold_s
    lru_w, gdsf_w = check_lru(tr)
    saved, z = lp_bound(tr)
    bound_w = tr.repeat_s - saved
    rl_w, nfrac = rounded_lp(tr, z)
    bel_w = belady_cost(tr)
    for name, v in (('rounded LP', rl_w), ('Belady-cost', bel_w), ('lru', lru_w), ('gdsf', gdsf_w)):
        if v < bound_w * (1 - 1e-6):
            fail(f"{name} ({v:.1f} s) below the lower bound ({bound_w:.1f} s): the bound is wrong")
    online, static, sd = online_bound(tr)
    lfu = lfu_cost(tr)
    if online > lru_w + c + 6 * sd:     # LRU is an online policy: its total estimates its expectation
        fail(f"the online bound ({online:.0f} s) is more than 6 sd above LRU's total ({lru_w + c:.0f} s): it is wrong")
    r = {'data': DATA_NAMES[data], 'zipf': tr.j['zipf'], 'cap': tr.j['cap_percent'], 'cold': c,
         'lru': lru_w + c, 'gdsf': gdsf_w + c, 'lp': bound_w + c, 'opt_ub': min(rl_w, bel_w) + c,
         'rounded': rl_w + c, 'belady': bel_w + c, 'frac': nfrac, 'online': online, 'static': static, 'sd': sd,
         'lfu': lfu}
    lru_store = store.get((0, data))
    if lru_store is not None and tr.j['zipf'] == 0.8 and tr.j['cap_percent'] == 25:
        st_all, st_warm = lru_store['rebuild_s'], lru_store['warm_rebuild_s']
        if abs((st_all - st_warm) - c) > 1e-3:
            fail(f"{DATA_NAMES[data]}: the FileStore's cold misses ({st_all - st_warm:.3f} s) are not this "
                 f"trace's ({c:.3f} s): not the same trace")
        if abs(st_all / (lru_w + c) - 1) > 0.05:
            fail(f"{DATA_NAMES[data]}: the FileStore's LRU ({st_all:.0f} s) is not within 5 % of the exact "
                 f"LRU ({lru_w + c:.0f} s)")
        r['store_lru'] = st_all
        if (1, data) in store:
            r['store_cost'] = store[(1, data)]['rebuild_s']
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bench', default=os.path.join(ROOT, 'build/ci/bench/bench_eviction_trace'))
    ap.add_argument('--data', default='0,1,2', help='0 corpus, 1 corpus with sizes shuffled, 2 kernel mix')
    ap.add_argument('--sweep', action='store_true', help='Zipf 0.6/0.8/1.0 x caps 10/25/50 %% (corpus and mix)')
    ap.add_argument('--store-json', action='append', default=[], help="bench_eviction_trace's JSON output")
    a = ap.parse_args()
    if not os.access(a.bench, os.X_OK):
        print(f"eviction_bound: {a.bench} is not built (cmake --build --preset ci --target bench_eviction_trace)",
              file=sys.stderr)
        sys.exit(2)
    store = store_rows(a.store_json)
    self_check()
    if a.sweep:
        runs = [(d, z, c) for d in (0, 2) for z in (0.6, 0.8, 1.0) for c in (10, 25, 50)]
    else:
        runs = [(int(d), 0.8, 25) for d in a.data.split(',')]
    print("total rebuild time in s, first misses included (the same under every policy: 'cold').\n"
          "OPT>=: the LP bound on every policy, offline included; OPT<=: the better of the rounded LP and\n"
          "Belady-cost (offline policies); online>=: the bound on the expected total of every online policy;\n"
          "static: the policy that knows the popularity and keeps the best set (this trace, +- 1 sd);\n"
          "lfu-c: online, uses x build time / bytes with uses counted over all past requests")
    print(f"{'data':15} {'zipf':>4} {'cap':>4} {'cold':>6} {'lru':>6} {'gdsf':>6} {'OPT>=':>6} {'OPT<=':>6} "
          f"{'online>=':>8} {'static':>12} {'lfu-c':>6} | {'lru/OPT>=':>9} {'lru/online>=':>12} "
          f"{'gdsf/OPT>=':>10} {'gdsf/online>=':>13} {'lru/lfu-c':>9}")
    worst = {}
    for d, z, cp in runs:
        r = analyse(Trace(dump_trace(a.bench, d, z, cp)), d, store)
        print(f"{r['data']:15} {r['zipf']:4.1f} {r['cap']:3.0f}% {r['cold']:6.0f} {r['lru']:6.0f} {r['gdsf']:6.0f} "
              f"{r['lp']:6.0f} {r['opt_ub']:6.0f} {r['online']:8.0f} {r['static']:6.0f} +-{r['sd']:4.0f} "
              f"{r['lfu']:6.0f} | {r['lru'] / r['lp']:8.2f}x {r['lru'] / r['online']:11.2f}x "
              f"{r['gdsf'] / r['lp']:9.2f}x {r['gdsf'] / r['online']:12.2f}x {r['lru'] / r['lfu']:8.2f}x", flush=True)
        if 'store_cost' in r:
            print(f"{'':15} FileStore (same trace): lru {r['store_lru']:.0f} s, cost {r['store_cost']:.0f} s: "
                  f"lru/cost {r['store_lru'] / r['store_cost']:.2f}x, cost/OPT>= {r['store_cost'] / r['lp']:.2f}x, "
                  f"cost/online>= {r['store_cost'] / r['online']:.2f}x, store lru/OPT>= "
                  f"{r['store_lru'] / r['lp']:.2f}x, store lru/online>= {r['store_lru'] / r['online']:.2f}x")
        w = worst.setdefault(r['data'], [0, 0])
        w[0], w[1] = max(w[0], r['lru'] / r['lp']), max(w[1], r['lru'] / r['online'])
    for data, (lp, online) in worst.items():
        print(f"{data}: largest lru / OPT>= {lp:.2f}x, largest lru / online>= {online:.2f}x")


if __name__ == '__main__':
    main()
