"""The searched microbatch size in stage binaries (issue 18).

`hetc compile` of examples/gpt_tiny.onnx onto tiny_hetero.yaml with
--global-batch 16 and no --microbatch: the planner searches the rows per
microbatch (tests/plan/test_mb_search.py checks the choice against brute
force) and plan.json records the chosen b and B = 16 / b.  The stage
binaries must run at that size: every stage config says `rows b` and
`accum B`, and launch.sh trains 10 steps whose losses equal `hetc train`
on the same global batch (16 rows a step, as B microbatches of b rows) to
1e-5 relative; elastic.env (launch.sh --elastic's re-plan) pins the chosen
size.  The same global batch cut as 16 microbatches of 1 row
(hetc train --microbatch 1 --accum 16) is a second oracle: the searched
plan changes how the batch is cut, not what a step computes.

usage: test_stages_mbsearch.py HETC WORKDIR
"""
import json
import os

from stagetest import StageTest, config_lines, losses, worst_rel, CLUSTERS, MODEL, OPT

STEPS = 10
G = 16
t = StageTest("tiny_hetero.yaml", gb=G, horizon=STEPS)
check = t.check

out = t.path("build")
p = t.run([t.hetc, MODEL, os.path.join(CLUSTERS, "tiny_hetero.yaml"), "--seq", str(t.seq),
           "--global-batch", str(G), "--threads", "2", "--steps", str(STEPS), *OPT, "-o", out])
if check(p.returncode == 0, f"hetc compile (microbatch searched) exit {p.returncode}"):
    plan = json.load(open(os.path.join(out, "plan.json")))
    b, B = plan.get("microbatch_rows"), plan["microbatches"]
    ms = plan.get("microbatch_search", [])
    check(len(ms) > 1 and b * B == G, f"plan.json: microbatch_rows {b} x {B}, search {ms}")
    best = min((c for c in ms if c["objective"] is not None),
               key=lambda c: (c["objective"], c["rows"]), default=None)
    check(best is not None and best["rows"] == b and best["objective"] == plan["objective"],
          f"plan.json: chose {b} rows but its search lists {ms}")
    print(f"searched: {b} rows x {B} microbatches; stages " + " | ".join(
        f"{s['layers'][0]}-{s['layers'][1]} {s['mesh']} dp{s['dp']} tp{s.get('tp', 1)}"
        for s in plan["stages"]), flush=True)
    for k in range(len(plan["stages"])):
        exe = os.path.join(out, f"stage_{k}")
        check(config_lines(exe, "rows") == [f"rows {b}"] and
              config_lines(exe, "accum") == [f"accum {B}"],
              f"stage {k}: config {config_lines(exe, 'rows')} {config_lines(exe, 'accum')}, "
              f"expected rows {b}, accum {B}")
    # launch.sh --elastic re-plans the survivors with elastic.env's arguments: the
    # searched size is pinned there (the survivors train the same rows)
    env = open(os.path.join(out, "elastic.env")).read()
    check(f"--microbatch {b})" in env, f"elastic.env does not pin --microbatch {b}: {env}")
    ref = t.reference(STEPS, mb=b, accum=B)
    check(len(ref) == STEPS, f"hetc train printed {len(ref)} loss lines of {STEPS}")
    t.expect_run(out, STEPS, ref, f"searched plan ({b} rows x {B})")
    # the same global batch as 16 one-row microbatches: the same losses
    one = t.reference(STEPS, mb=1, accum=G)
    w = worst_rel(one, ref)
    check(len(one) == STEPS and w <= 1e-5, f"hetc train 16 x 1 row vs {B} x {b} rows: "
          f"relative difference {w:.3g}")
t.finish()
