"""Every seed planner's plan through the stage binaries (issue 18, item 7).

For each planner of `hetc plan --planner=NAME` (hapt uniform coarse
coarse-blocks metis metis-mem zorse autohet heteroauto) on
examples/clusters/tiny_hetero.yaml with examples/gpt_tiny.onnx (the stage
tests' batch shape: seq 64, microbatch 4, global batch 16):

- hetc plan writes plan.json (a plan the binaries cannot run too: it records
  the forms it needs, docs/PLAN_FORMAT.md);
- `hetc --plan plan.json` either compiles it, and then launch.sh's 10 steps
  equal `hetc train` on the same global batch and microbatching (the plan's
  rows per microbatch = global_batch / microbatches, accum = microbatches)
  to 1e-5 relative; or refuses it, and then the plan records a form the
  binaries lack and the refusal names every such stage and each form it
  needs.  Which forms a stage needs is read from plan.json's keys ("parts",
  "zero" on such a stage, "offload", "group", "pipe"), not from the message.
  A plan that records no such form must compile; one that does must be
  refused.

Two more refusals on other clusters, where the planners choose the other
forms: autohet on single_a100.yaml (several pipelines with their own
boundaries) and zorse on tiny_pair.yaml (offload on single-mesh stages,
ZeRO-2 over even groups, which alone would run).

Prints one line per planner (compiled + max relative difference, or the
refusal); docs/COMPARISON.md's "runs today" table is that summary.

usage: test_stages_planners.py HETC WORKDIR
"""
import json
import os

from stagetest import StageTest, losses, worst_rel, CLUSTERS, MODEL

PLANNERS = ["hapt", "uniform", "coarse", "coarse-blocks", "metis", "metis-mem", "zorse",
            "autohet", "heteroauto"]
STEPS = 10
t = StageTest("tiny_hetero.yaml", horizon=STEPS)
check = t.check


def plan_with(planner, cluster, out):
    """hetc plan --planner=NAME into out: plan.json as a dict, or None."""
    p = t.run([t.hetc, "plan", MODEL, os.path.join(CLUSTERS, cluster), "--seq", str(t.seq),
               "--microbatch", str(t.mb), "--global-batch", str(t.gb), "--planner=" + planner,
               "-o", out])
    if not check(p.returncode == 0, f"{cluster} {planner}: hetc plan exit {p.returncode}"):
        return None
    path = os.path.join(out, "plan.json")
    if not check(os.path.exists(path), f"{cluster} {planner}: hetc plan wrote no plan.json"):
        return None
    return json.load(open(path))


def forms_of(plan):
    """stage index -> the words its refusal must hold, from plan.json's keys;
    plus the plan-wide words (several pipelines)."""
    need, whole = {}, []
    meshes = {}
    for k, s in enumerate(plan["stages"]):
        w = []
        if len(s.get("parts", [])) > 1:
            w.append("heterogeneous data parallelism")
            w += [f"{q['devices']} x {q['mesh']}" for q in s["parts"]]
            if s.get("zero", 0):
                w.append(f"ZeRO-{s['zero']} on that uneven DP group")
        if s.get("offload"):
            w.append("CPU offload")
        if s.get("group", 0) > 0:
            w.append("ministages sharing devices")
        if w:
            need[k] = w
        if s.get("pipe", 0) > 0:
            meshes[s["pipe"]] = 1
    if len(meshes) > 1:
        whole = [f"{len(meshes)} pipelines", "own stage boundaries", "all-reduced"]
    return need, whole


def refusal_names_forms(label, err, plan):
    need, whole = forms_of(plan)
    check(bool(need or whole), f"{label}: refused though plan.json records no form the "
          f"binaries lack: {err.strip()[-400:]}")
    for k, words in need.items():
        s = plan["stages"][k]
        head = f"stage {k} (layers {s['layers'][0]}-{s['layers'][1]}) needs"
        check(head in err, f"{label}: the refusal does not name {head!r}: {err.strip()[-400:]}")
        for wd in words:
            check(wd in err, f"{label}: the refusal of stage {k} does not name {wd!r}")
    for wd in whole:
        check(wd in err, f"{label}: the refusal does not name {wd!r}: {err.strip()[-400:]}")
    return sorted(need), bool(whole)


refs = {}
summary = []
for name in PLANNERS:
    plan = plan_with(name, t.cluster, t.path("plan_" + name))
    if plan is None:
        summary.append((name, "no plan.json"))
        continue
    rows = plan["global_batch"] // plan["microbatches"]
    B = plan["microbatches"]
    check(plan["global_batch"] == t.gb, f"{name}: plan.json global_batch {plan['global_batch']}")
    out = t.path("build_" + name)
    p = t.compile(out, "--plan", os.path.join(t.path("plan_" + name), "plan.json"), mb=rows,
                  quiet=True)
    need, whole = forms_of(plan)
    shape = " | ".join(f"{s['layers'][0]}-{s['layers'][1]} {s['mesh']} dp{s['dp']} tp{s['tp']}"
                       + (f" z{s['zero']}" if s.get("zero") else "") for s in plan["stages"])
    if p.returncode:
        err = p.stderr
        print(err.strip()[-1500:], flush=True)
        stages, pipes = refusal_names_forms(name, err, plan)
        summary.append((name, f"refused ({shape}): " + err.strip().splitlines()[-1][-600:]))
        continue
    check(not need and not whole, f"{name}: compiled a plan recording forms the binaries lack "
          f"({need}, {whole})")
    if (rows, B) not in refs:
        refs[(rows, B)] = t.reference(STEPS, mb=rows, accum=B)
    got, w = t.expect_run(out, STEPS, refs[(rows, B)], name, "--checkpoint-dir",
                          t.path("ckpt_" + name))
    summary.append((name, f"compiled ({shape}; {B} microbatches x {rows} rows): {STEPS} steps "
                    f"== hetc train to {w:.2g} relative"))

# the other forms, on the clusters where the planners choose them
for cluster, name in (("single_a100.yaml", "autohet"), ("tiny_pair.yaml", "zorse")):
    label = f"{cluster} {name}"
    d = t.path(f"plan_{name}_{cluster.split('.')[0]}")
    plan = plan_with(name, cluster, d)
    if plan is None:
        continue
    rows = plan["global_batch"] // plan["microbatches"]
    p = t.compile(t.path("build_x"), "--plan", os.path.join(d, "plan.json"), cluster=cluster,
                  mb=rows, quiet=True)
    if check(p.returncode != 0, f"{label}: compiled (expected a refusal)"):
        print(p.stderr.strip()[-1500:], flush=True)
        refusal_names_forms(label, p.stderr, plan)
    check("Traceback" not in p.stderr and p.returncode in (1, 2),
          f"{label}: refusal exit {p.returncode}")

print("\nplanners on tiny_hetero.yaml, gpt_tiny (seq 64, global batch 16):")
for name, what in summary:
    print(f"  {name:14s} {what}")
t.finish()
