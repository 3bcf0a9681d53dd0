#!/usr/bin/env python3
"""Summary of paired whole-process runs (bench/paired_runs.c, scripts/bench-miss-pair.sh).

Each input line is one round: numbers in columns, every command of the round
measured in the same minute. For a pair of columns (OFF, ON) this prints the
medians of each, and the median of the per-round differences ON - OFF with
its quartiles and a 95 % bootstrap confidence interval for that median.

The interval is what decides a target such as "under 1 %": the quartiles say
how much one round moves on a shared machine; the interval says how well the
median of all rounds is known. It is a percentile bootstrap (2 000
resamples of the rounds, a fixed seed so a rerun over the same file prints
the same figures).

  paired_summary.py FILE wall OFF_COL ON_COL OFF_LABEL ON_LABEL
      (paired_runs.c output: columns are wall_us cpu_us per command; OFF_COL
      and ON_COL are the 1-based wall columns, the CPU column follows each)
  paired_summary.py FILE cpu OFF_COL ON_COL ON_LABEL
      (one CPU figure in ms per column, e.g. scripts/bench-miss-pair.sh)
  paired_summary.py FILE medians KERNEL
      (scripts/bench-miss-pair.sh: the median of each of its five columns)
"""
import random
import statistics as st
import sys

RESAMPLES = 2000


def rows_of(path):
    rows = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if fields:
                rows.append([float(x) for x in fields])
    if not rows:
        sys.exit(f"paired_summary.py: {path} holds no rounds: the runs failed (see above)")
    return rows


def median_ci(values, seed=23):
    """(median, q1, q3, ci_low, ci_high) of `values`."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(st.median(rng.choices(values, k=n)) for _ in range(RESAMPLES))
    q = st.quantiles(values, n=4) if n > 1 else [values[0]] * 3
    return (st.median(values), q[0], q[2], meds[int(0.025 * RESAMPLES)], meds[int(0.975 * RESAMPLES) - 1])


def wall_pairs(rows, off, on, off_label, on_label):
    ow = [r[off - 1] for r in rows]
    nw = [r[on - 1] for r in rows]
    oc = [r[off] for r in rows]
    nc = [r[on] for r in rows]
    dw = median_ci([(n - o) * 100 / o for o, n in zip(ow, nw)])
    dc = median_ci([n - o for o, n in zip(oc, nc)])
    dcp = median_ci([(n - o) * 100 / o for o, n in zip(oc, nc)])
    print(f"{off_label} {st.median(ow):.0f} us (CPU {st.median(oc):.0f} us), "
          f"{on_label} {st.median(nw):.0f} us (CPU {st.median(nc):.0f} us); "
          "difference, median of the paired differences [quartiles] {95% CI of the median}: "
          f"wall {dw[0]:+.2f}% [{dw[1]:+.2f}, {dw[2]:+.2f}] {{{dw[3]:+.2f}, {dw[4]:+.2f}}}, "
          f"CPU {dc[0]:+.0f} us [{dc[1]:+.0f}, {dc[2]:+.0f}] = {dcp[0]:+.2f}% [{dcp[1]:+.2f}, {dcp[2]:+.2f}] "
          f"{{{dcp[3]:+.2f}, {dcp[4]:+.2f}}}")


def cpu_pairs(rows, off, on, on_label):
    base = st.median(r[off - 1] for r in rows)
    d = median_ci([r[on - 1] - r[off - 1] for r in rows])
    print(f"  {on_label:<12} cost over plain: median {d[0]:+.2f} ms ({100 * d[0] / base:.1f} % of plain), "
          f"quartiles {d[1]:+.2f} .. {d[2]:+.2f}, 95% CI of the median {d[3]:+.2f} .. {d[4]:+.2f}")


def miss_pair_medians(rows, kernel):
    med = [st.median(c) for c in zip(*rows)]
    print(f"{kernel}, {len(rows)} rounds, medians (ms CPU): plain {med[0]:.2f} | new dir A {med[1]:.2f} "
          f"B {med[2]:.2f} | warm dir A {med[3]:.2f} B {med[4]:.2f}")


def main(argv):
    if len(argv) == 4 and argv[2] == "medians":
        miss_pair_medians(rows_of(argv[1]), argv[3])
    elif len(argv) == 7 and argv[2] == "wall":
        wall_pairs(rows_of(argv[1]), int(argv[3]), int(argv[4]), argv[5], argv[6])
    elif len(argv) == 6 and argv[2] == "cpu":
        cpu_pairs(rows_of(argv[1]), int(argv[3]), int(argv[4]), argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
