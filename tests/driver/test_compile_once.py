#!/usr/bin/env python3
"""hetc compile computes once (issue 20): the ONNX model is read and decoded
once per compile, the graphs built from it are the planner's, the
fixed-batch probe's, the planner's arena model's (issue 17: one per
distinct row count a DP rank of a stage may run, ceil(rows / dp) for dp up
to the largest mesh, driver/plan_arena.c) and one per distinct local row
count of the plan (not one more to recover layer ids), and --microbatch is
parsed once.

The expected graph count is derived from the plan.json the compile wrote,
with rt_row_split's rule (rows // dp, one more on the first rows % dp
ranks) computed here, not by hetc.

usage: test_compile_once.py HETC SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
# three V100s beside a T4: a DP = 3 stage beside a DP = 1 stage, so the
# stages run 4, 2 and 1 rows per DP rank
CLUSTER = os.path.join(SRC, "examples", "clusters", "uneven_dp.yaml")
fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails += 1


def run(args):
    """hetc args, at --precision fp32 unless they name one (tests/hetc_cmd.py)"""
    p = subprocess.run(pinned([HETC] + args), capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def local_rows(rows, dp, r):
    return rows // dp + (1 if r < rows % dp else 0)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "b")
    base = ["compile", MODEL, CLUSTER, "-o", out, "--seq", "64", "--microbatch", "4",
            "--global-batch", "8", "--threads", "1", "--no-progress"]
    rc, so, se = run(base + ["-v"])
    check(rc == 0, "hetc compile on uneven_dp.yaml succeeds (rc %d)" % rc)
    if rc:
        print(se[-3000:])
        sys.exit(1)
    m = re.findall(r"^compile: model read (\d+) time\(s\), (\d+) graph\(s\) built from it$", se, re.M)
    check(len(m) == 1, "one model-read report line")
    reads, builds = (int(m[0][0]), int(m[0][1])) if m else (-1, -1)
    check(reads == 1, "the model is read once (read %d times)" % reads)
    plan = json.load(open(os.path.join(out, "plan.json")))
    rows = plan["global_batch"] // plan["microbatches"]
    dps = [s["dp"] for s in plan["stages"]]
    check(len(set(dps)) > 1, "the plan's DP degrees differ (%s)" % dps)
    distinct = {local_rows(rows, dp, r) for dp in dps for r in (0, dp - 1)}
    # the planner's graph, the fixed-batch probe, the arena model's graphs (DP rank 0's
    # rows of every dp up to the largest mesh), one graph per distinct row count
    text = open(CLUSTER).read()
    largest = max(int(n) * int(m) for n, m in
                  re.findall(r"nodes: (\d+)\s+devices_per_node: (\d+)", text))
    arena = {local_rows(rows, dp, 0) for dp in range(1, min(rows, largest) + 1)}
    want = 2 + len(arena) + len(distinct)
    check(builds == want, "graphs built: %d, expected %d (planner + probe + arena rows %s + "
          "rows %s)" % (builds, want, sorted(arena), sorted(distinct)))
    check(se.count("params:") == 1, "the parameter set is reported once, not per import")

    # --plan FILE: layer ids from one import at the plan's rows, then the stages
    pj = os.path.join(tmp, "plan.json")
    with open(pj, "w") as f:
        json.dump(plan, f)
    rc, so, se = run(["compile", MODEL, CLUSTER, "-o", os.path.join(tmp, "c"), "--seq", "64",
                      "--plan", pj, "-v"])
    m = re.findall(r"^compile: model read (\d+) time\(s\), (\d+) graph\(s\) built from it$", se, re.M)
    check(rc == 0 and len(m) == 1 and m[0] == ("1", str(1 + len(distinct))),
          "--plan FILE: read once, %d graphs (got %s)" % (1 + len(distinct), m))

    # --microbatch is parsed once: a bad value is one error, whoever reads it
    before = sorted(os.listdir(tmp))
    for bad, what in (("x", "not a number"), ("-3", "negative"), ("0", "zero")):
        rc, so, se = run(base[:7] + ["--microbatch", bad])
        lines = [l for l in se.splitlines() if "--microbatch" in l]
        check(rc == 2 and len(lines) == 1,
              "--microbatch %s (%s): exit 2 and one error line (rc %d, %s)"
              % (bad, what, rc, lines))
    check(sorted(os.listdir(tmp)) == before, "no build directory left by the bad values")

print("%d failure(s)" % fails)
sys.exit(1 if fails else 0)
