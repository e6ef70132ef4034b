"""Uneven data parallelism in stage binaries (issue 18, items 1 and 2).

examples/clusters/uneven_dp.yaml (three V100s and a T4) with
examples/gpt_tiny.onnx, seq 64, microbatch 4, global batch 16: `hetc plan`
(hapt and coarse) gives the three V100s one DP = 3 stage, so its ranks take
2, 1 and 1 rows of each microbatch (rt_row_split: the first rows % dp ranks
one more).  Each row count is its own binary (stage_S for the larger,
stage_S_lo for the rest); launch.sh starts them in DP rank order.  The loss
of each last-stage rank is scaled by its rows / the microbatch's rows, so
the DP group's plain gradient sum is the row-weighted sum = the uniform
batch's mean gradient.  Oracle: `hetc train`, one process, the same 4
microbatches of 4 rows: 10 steps' losses to 1e-5 relative, printed
gradient norms to 5e-5.  Then ZeRO-2 on that uneven-rows DP group (even
flat shards of every parameter over the 3 ranks, uneven rows): the same
10 steps.  plan.json (version 2) records each DP rank's rows ([2, 1, 1]);
another split ([1, 1, 2]: rows in proportion to device speed beyond the
runtime's split) becomes the stage's row table (stage_K for DP rank 0's
one row, stage_K_r2) and trains the same 10 steps
(tests/stages/test_stages_rowtable.py has more); a version 1 plan (no
rows) still compiles.  A plan whose dp exceeds the rows (a DP
rank without a row) is refused naming the stage.

usage: test_stages_hdp.py HETC WORKDIR
"""
import json
import os
import re

from stagetest import StageTest, losses, worst_rel, CLUSTERS, MODEL

STEPS = 10
CLUSTER = "uneven_dp.yaml"
t = StageTest(CLUSTER, horizon=STEPS)
check = t.check


def grad_norms(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", text, re.M)}


ref_run = t.train(STEPS)
check(ref_run.returncode == 0, "hetc train failed")
ref, rnorm = losses(ref_run.stdout), grad_norms(ref_run.stdout)
check(len(ref) == STEPS, f"hetc train printed {len(ref)} loss lines of {STEPS}")


def run_plan(label, path, split=True):
    """compile plan.json at path, launch STEPS steps, compare with hetc train
    (split: the plan's uneven stages have the runtime's split, stage_K_lo)."""
    out = t.path("build_" + label)
    p = t.compile(out, "--plan", path)
    if not check(p.returncode == 0, f"{label}: hetc compile --plan exit {p.returncode}"):
        return None
    plan = json.load(open(path))
    rows = plan["global_batch"] // plan["microbatches"]
    uneven = [k for k, s in enumerate(plan["stages"]) if rows % s["dp"]]
    for k in uneven if split else ():
        check(os.access(os.path.join(out, f"stage_{k}_lo"), os.X_OK),
              f"{label}: stage {k} (dp {plan['stages'][k]['dp']}, {rows} rows) has no stage_{k}_lo")
        # DP ranks rows % dp .. dp - 1 run stage_K_lo: in mpirun's command (rank
        # order) and in srun.conf's rank ranges
        dp, first = plan["stages"][k]["dp"], sum(s["dp"] * s.get("tp", 1) for s in plan["stages"][:k])
        hi = rows % plan["stages"][k]["dp"]
        dry = t.run([os.path.join(out, "launch.sh"), "--dry-run", "--data", "x"]).stdout
        want = f"-np {hi} {out}/stage_{k} --data x : -np {dp - hi} {out}/stage_{k}_lo --data x"
        check(want in dry, f"{label}: launch.sh --dry-run lacks {want!r}: {dry.strip()}")
        srun = open(os.path.join(out, "srun.conf")).read()
        lo = f"{first + hi}-{first + dp - 1}" if dp - hi > 1 else f"{first + hi}"
        check(re.search(rf"^{lo} \S*/stage_{k}_lo$", srun, re.M) is not None,
              f"{label}: srun.conf does not give ranks {lo} to stage_{k}_lo: {srun}")
    pr = t.launch(out, STEPS)
    got, w = t.expect_losses(pr, label, ref, n=STEPS)
    norms = grad_norms(pr.stdout)
    wn = max((abs(v - rnorm.get(k, 1e30)) / max(abs(rnorm.get(k, 1e30)), 1e-30)
              for k, v in norms.items()), default=1.0)
    check(len(norms) == STEPS and wn <= 5e-5, f"{label}: {len(norms)} grad norms, max relative "
          f"difference {wn:.3g} from hetc train's")
    shape = " | ".join(f"{s['layers'][0]}-{s['layers'][1]} {s['mesh']} dp{s['dp']}"
                       + (f" z{s['zero']}" if s.get("zero") else "") for s in plan["stages"])
    print(f"{label} ({shape}; uneven stages {uneven}): {STEPS} steps == hetc train to {w:.2g} "
          f"relative, grad norms to {wn:.2g}", flush=True)
    return uneven


hapt = None
for planner in ("hapt", "coarse"):
    out = t.path("plan_" + planner)
    p = t.run([t.hetc, "plan", MODEL, os.path.join(CLUSTERS, CLUSTER), "--seq", str(t.seq),
               "--microbatch", str(t.mb), "--global-batch", str(t.gb), "--planner=" + planner,
               "-o", out])
    if not check(p.returncode == 0, f"hetc plan --planner={planner} exit {p.returncode}"):
        continue
    path = os.path.join(out, "plan.json")
    uneven = run_plan(planner, path)
    # the cluster is built for it: the plan must need uneven rows
    check(uneven is None or len(uneven) > 0, f"{planner}: no stage with uneven rows on {CLUSTER}")
    if planner == "hapt":
        hapt = path

# ZeRO-2 over the uneven-rows DP group (item 2: even flat shards, uneven rows)
if hapt:
    q = json.load(open(hapt))
    rows = q["global_batch"] // q["microbatches"]
    ks = [k for k, s in enumerate(q["stages"]) if rows % s["dp"]]
    if check(len(ks) > 0, "hapt plan: no uneven stage for ZeRO-2"):
        for k in ks:
            q["stages"][k]["zero"] = 2
        path = t.path("plan_hapt_zero2.json")
        json.dump(q, open(path, "w"), indent=1)
        run_plan("hapt_zero2", path)

    # plan.json version 2 records each DP rank's rows: the runtime's split
    q = json.load(open(hapt))
    for k, st in enumerate(q["stages"]):
        if st["dp"] > 1:
            want = [rows // st["dp"] + (r < rows % st["dp"]) for r in range(st["dp"])]
            check(q["version"] == 2 and st.get("rows") == want,
                  f"hapt plan.json: version {q['version']}, stage {k} rows {st.get('rows')}, "
                  f"want {want}")
    # another per-rank split (speed-proportional rows beyond it): the stage's
    # row table, a binary per count (DP rank 0's stage_K, then stage_K_r2)
    for k in ks:
        q["stages"][k]["rows"] = sorted(q["stages"][k]["rows"])
    path = t.path("plan_rows_reversed.json")
    json.dump(q, open(path, "w"), indent=1)
    run_plan("rows_reversed", path, split=False)
    out = t.path("build_rows_reversed")
    for k in ks:
        r = q["stages"][k]["rows"]
        check(os.access(os.path.join(out, f"stage_{k}_r{r[-1]}"), os.X_OK) and
              not os.path.exists(os.path.join(out, f"stage_{k}_lo")),
              f"rows {r}: want stage_{k} and stage_{k}_r{r[-1]}: {sorted(os.listdir(out))}")
    # an old plan (version 1, no rows) still reads and compiles
    for st in q["stages"]:
        st.pop("rows", None)
    q["version"] = 1
    path = t.path("plan_v1.json")
    json.dump(q, open(path, "w"), indent=1)
    p = t.compile(t.path("build_v1"), "--plan", path)
    check(p.returncode == 0, f"a version 1 plan: hetc compile --plan exit {p.returncode}")

    # a DP rank without a row: refused naming the stage
    q = json.load(open(hapt))
    k = max(range(len(q["stages"])), key=lambda i: q["stages"][i]["dp"])
    q["stages"][k]["dp"] = rows + 1
    q["stages"][k].pop("rows", None)
    path = t.path("plan_too_wide.json")
    json.dump(q, open(path, "w"), indent=1)
    p = t.compile(t.path("build_too_wide"), "--plan", path, quiet=True)
    check(p.returncode in (1, 2) and f'stages[{k}]."dp" {rows + 1} exceeds' in p.stderr,
          f"dp {rows + 1} over {rows} rows: exit {p.returncode}, {p.stderr.strip()[-300:]}")

t.finish()
