#!/usr/bin/env python3
"""bench/gpu: where a whole training step's GPU time goes, from ktrace.c's records.

    python3 bench/gpu/ktrace_report.py DIR [--skip 1]

DIR holds ktrace.<pid>.csv files (LD_PRELOAD=libktrace.so
HETC_KTRACE_DIR=DIR launch.sh ...); the largest one (the busiest stage)
is read.  A step starts at the forward's first embedding gather; the first --skip
steps (warm-up) and the last (cut short by the end of the run) are left
out.  (A step is cut at its first `k_embedding` after the last step's
optimizer kernels.)  For the median of the remaining steps it prints the step's span on
the GPU clock, the time some kernel, memset or memcpy ran (the union of
their intervals), the idle rest (launch gaps, host work, synchronisation)
and the busy time by kernel family (kernel_profile.py's grouping).
"""
import argparse
import collections
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_profile import family  # noqa: E402


def demangle(name):
    """CUPTI gives mangled names: _Z<len><name>... -> name (enough for family())"""
    m = re.match(r"_Z(\d+)(\w+)", name)
    if m and not name.startswith("_ZN"):
        return m.group(2)[:int(m.group(1))]
    return name


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(",", 3)
            if len(parts) != 4:
                continue
            kind, s, e, name = parts
            fam = family(demangle(name)) if kind == "K" else name.split()[0]
            recs.append((int(s), int(e), fam))
    recs.sort()
    return recs


def union_ns(iv):
    tot, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--skip", type=int, default=1, help="warm-up steps left out")
    a = ap.parse_args()
    files = glob.glob(os.path.join(a.dir, "ktrace.*.csv"))
    if not files:
        sys.exit(f"ktrace_report: no ktrace.*.csv in {a.dir}")
    recs = load(max(files, key=os.path.getsize))
    starts, updated = [], True
    for i, (s, e, fam) in enumerate(recs):
        if fam == "k_embedding" and updated:  # the first gather after an optimizer update
            starts.append(i)
            updated = False
        elif fam.startswith("k_adamw") or fam.startswith("k_sgd"):
            updated = True
    steps = []
    for j in range(len(starts) - 1):
        seg = recs[starts[j]:starts[j + 1]]
        span = recs[starts[j + 1]][0] - seg[0][0]
        busy = union_ns([(s, e) for s, e, _ in seg])
        fam = collections.defaultdict(lambda: [0, 0])
        for s, e, f in seg:
            fam[f][0] += 1
            fam[f][1] += e - s
        steps.append((span, busy, fam))
    steps = steps[a.skip:]
    if not steps:
        sys.exit(f"ktrace_report: {len(starts)} step starts found: too few whole steps "
                 f"after {a.skip} skipped (run more steps)")
    order = sorted(range(len(steps)), key=lambda i: steps[i][0])
    span, busy, fam = steps[order[len(order) // 2]]
    ms = 1e-6
    print(f"steps: {len(steps)} whole steps after {a.skip} skipped; median step "
          f"{span * ms:.1f} ms on the GPU clock (all: "
          f"{', '.join(f'{s[0] * ms:.1f}' for s in steps)}); GPU busy {busy * ms:.1f} ms "
          f"({100 * busy / span:.0f} %), idle {(span - busy) * ms:.1f} ms")
    print()
    print("| family | launches / step | ms / step | % of the step |")
    print("| --- | ---: | ---: | ---: |")
    for name, (n, t) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {t * ms:.2f} | {100 * t / span:.1f} |")
    print(f"| (idle: no kernel, memset or memcpy running) | | {(span - busy) * ms:.2f} | "
          f"{100 * (span - busy) / span:.1f} |")


if __name__ == "__main__":
    main()
