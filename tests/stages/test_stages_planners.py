"""Every seed planner's plan through the stage binaries (issue 18, item 7).

For each planner of `hetc plan --planner=NAME` (hapt uniform coarse
coarse-blocks metis metis-mem zorse autohet heteroauto) on
examples/clusters/tiny_hetero.yaml with examples/gpt_tiny.onnx (the stage
tests' batch shape: seq 64, microbatch 4, global batch 16):

- hetc plan writes plan.json (a plan the binaries cannot run too: it records
  the forms it needs, docs/PLAN_FORMAT.md);
- a compiled plan's launch.sh places every rank on the mesh plan.json gives
  it (rank_mesh; a DP group over several meshes, "parts", part by part: Zorse
  on tiny_hetero, MUST_RUN) and no rank's row count is 0;
- `hetc --plan plan.json` either compiles it, and then launch.sh's 10 steps
  equal `hetc train` on the same global batch and microbatching (the plan's
  rows per microbatch = global_batch / microbatches, accum = microbatches)
  to 1e-5 relative; or refuses it, and then the plan records a form the
  binaries lack and the refusal names every such stage and each form it
  needs.  Which forms a stage needs is read from plan.json's keys ("pipe"
  with ZeRO, TP, offload or "group" on pipelines that do not line up; a "dp" above the
  rows of a microbatch: a DP rank without a row), not from the message.
  A plan that records no such form must compile; one that does must be
  refused.  "offload" is no such form since issue 18 item 4: an offloaded
  stage compiles and trains (its parameters and optimizer state streamed
  through a host store, tests/stages/test_stages_offload.py).

The same on examples/clusters/three_mesh.yaml (16 devices, three device
types), where the planners choose the other forms: TP on the embedding or
the head alone (tied gpt_tiny: nothing to shard, run replicated), several
pipelines (autohet: J = 2 whose stages line up, run as one pipeline whose
stage k's DP group holds both pipelines' stage k; pipelines whose stages do
not line up run too, tests/stages/test_stages_pipes.py, but not with TP,
ZeRO or offload on them: refused by key), offload on single-mesh stages
(zorse: it runs, every stage offloaded, ZeRO-2).  Every compiled run's printed gradient norms must equal hetc
train's to 5e-5 (6 printed digits) too.

No planner chooses a stage whose dp exceeds the rows of its pipeline
microbatch (a DP rank without a row: infeasible in every planner's search
since issue 18), so no plan.json here may hold one; on three_mesh (4 rows,
an 8-device A100 mesh) hapt, coarse and coarse-blocks chose dp 8 before and
must now compile and run (MUST_RUN).

Prints one line per planner (compiled + max relative difference, or the
refusal); docs/COMPARISON.md's "runs today" table is that summary.

With CLUSTER and GB: every planner on that one cluster at global batch GB
instead: stages_planners_pipes runs examples/clusters/two_pipes.yaml at 32,
built so that AutoHet's plan is two pipelines with their own stage
boundaries (MUST_RUN, and it must not line up); stages_planners_uneven
runs uneven_dp.yaml at 16, built so that hapt's and coarse's plans hold a
DP group whose dp does not divide the rows (MUST_RUN, and they must);
stages_planners_offload runs ministages.yaml at 16, built so that the
model's states do not fit its two 1.01 GiB devices: zorse's plan offloads
every stage and shares devices between ministages, heteroauto's fits by
recompute (both MUST_RUN), and the seven planners that model neither must
exit 1 with "no feasible plan" naming memory.

--forms-only (the ASan+UBSan build, where each launch is several times
slower): only the cases above that pin an outcome (MUST_RUN, the
no-feasible-plan refusals) and hapt's plan on each cluster.

usage: test_stages_planners.py HETC WORKDIR [CLUSTER GB] [--forms-only]
"""
import json
import os
import re
import sys

from stagetest import StageTest, losses, worst_rel, CLUSTERS, MODEL

PLANNERS = ["hapt", "uniform", "coarse", "coarse-blocks", "metis", "metis-mem", "zorse",
            "autohet", "heteroauto"]
FORMS_ONLY = "--forms-only" in sys.argv
ARGS = [a for a in sys.argv if a != "--forms-only"]
ONE = ARGS[3:5]
CASES = [(c, p) for c in ([ONE[0]] if ONE else ("tiny_hetero.yaml", "three_mesh.yaml"))
         for p in PLANNERS]
GB = int(ONE[1]) if ONE else 16
# plans that record no form the binaries lack: they must compile and run
MUST_RUN = {("three_mesh.yaml", p) for p in ("hapt", "coarse", "coarse-blocks")}
# Zorse's DP group over the v100 and a100 meshes (plan.json parts) runs since
# launch.sh places each part's ranks on its mesh
MUST_RUN |= {("tiny_hetero.yaml", "zorse")}
# AutoHet's two pipelines on three_mesh cut the model at the same layers: they
# run as one pipeline whose stages' DP groups hold both pipelines' stages
MUST_RUN |= {("three_mesh.yaml", "autohet")}
# two_pipes.yaml is built for AutoHet's pipelines that do not line up: every
# layer's gradients summed over the stages holding it (plan_holders.c)
MUST_RUN |= {("two_pipes.yaml", "autohet")}
MISALIGNED = {("two_pipes.yaml", "autohet")}
# uneven_dp.yaml is built for a DP group whose dp does not divide the rows
# (three V100s over 4 rows: 2, 1, 1): hapt's and coarse's plans have one
UNEVEN = {("uneven_dp.yaml", "hapt"), ("uneven_dp.yaml", "coarse")}
MUST_RUN |= UNEVEN
# ministages.yaml is built for CPU offload (two devices of 1.01 GiB: the
# model's fp32 states do not fit beside the runtime reserve): zorse offloads
# (and shares devices between ministages) and heteroauto recomputes into it;
# the planners that model neither must say there is no plan, naming memory
OFFLOAD = {("ministages.yaml", "zorse")}
MUST_RUN |= OFFLOAD | {("ministages.yaml", "heteroauto")}
NO_PLAN = {("ministages.yaml", p) for p in ("hapt", "uniform", "coarse", "coarse-blocks", "metis",
                                            "metis-mem", "autohet")}
if FORMS_ONLY:
    # the sanitizer build: the cases whose outcome this test pins (the forms each
    # cluster was built for, the refusals) and hapt's plan on every cluster; the
    # other planners' plans are these forms again, run by the normal build
    CASES = [c for c in CASES if c in MUST_RUN or c in NO_PLAN or c[1] == "hapt"]
STEPS = 10
t = StageTest("tiny_hetero.yaml", horizon=STEPS, gb=GB)
check = t.check


def plan_with(planner, cluster, out):
    """hetc plan --planner=NAME into out: plan.json as a dict, or None (a
    failure of the test, unless NO_PLAN expects the planner to find none:
    then it must exit 1 saying so and naming memory, and write no plan)."""
    p = t.run([t.hetc, "plan", MODEL, os.path.join(CLUSTERS, cluster), "--seq", str(t.seq),
               "--microbatch", str(t.mb), "--global-batch", str(t.gb), "--planner=" + planner,
               "-o", out], quiet=(cluster, planner) in NO_PLAN)
    if (cluster, planner) in NO_PLAN:
        err = p.stderr.lower()
        check(p.returncode == 1 and "no feasible plan" in err and "memory" in err and
              "Traceback" not in p.stderr and not os.path.exists(os.path.join(out, "plan.json")),
              f"{cluster} {planner}: expected 'no feasible plan' naming memory, got exit "
              f"{p.returncode}: {p.stderr.strip()[-300:]}")
        return None
    if not check(p.returncode == 0, f"{cluster} {planner}: hetc plan exit {p.returncode}"):
        return None
    path = os.path.join(out, "plan.json")
    if not check(os.path.exists(path), f"{cluster} {planner}: hetc plan wrote no plan.json"):
        return None
    return json.load(open(path))


def pipelines(plan):
    """plan.json's pipelines as lists of stages (one list: one pipeline)."""
    by = {}
    for s in plan["stages"]:
        by.setdefault(s.get("pipe", 0), []).append(s)
    return [by[q] for q in sorted(by)]


def lined_up(plan):
    """Several pipelines that cut the model at the same layers with the same
    tp, ZeRO, recompute, offload and microbatches: hetc compile runs them as
    one pipeline (driver/plan_pipes.c), every pipeline's stage k in stage k's
    DP group."""
    ps = pipelines(plan)
    if len(ps) < 2 or len({len(p) for p in ps}) != 1:
        return False
    key = ("layers", "tp", "zero", "recompute", "offload")
    return all(all(p[k].get(x) == ps[0][k].get(x) for x in key) and
               p[k].get("pipe_microbatches") == plan["microbatches"] and
               not p[k].get("group") for p in ps for k in range(len(p)))


def holder_sets(plan):
    """AutoHet's layer-wise gradient groups, brute force: per layer the
    plan.json index of each pipeline's stage holding it, runs of layers with
    the same holders merged: [(first, last, [stage per pipeline])]."""
    ps = pipelines(plan)
    idx = {id(s): k for k, s in enumerate(plan["stages"])}
    top = max(s["layers"][1] for s in plan["stages"])
    out = []
    for lay in range(1, top + 1):
        hold = [idx[id(s)] for p in ps for s in p if s["layers"][0] <= lay <= s["layers"][1]]
        if out and out[-1][2] == hold:
            out[-1][1] = lay
        else:
            out.append([lay, lay, hold])
    return out


def holder_text(plan):
    """The holder sets as hetc compile's refusal words them."""
    return "; ".join(f"layers {a}-{b} on stages " + ", ".join(map(str, h))
                     for a, b, h in holder_sets(plan))


def forms_of(plan):
    """stage index -> the words its refusal must hold, from plan.json's keys;
    plus the plan-wide words (several pipelines)."""
    need, whole = {}, []
    meshes = {}
    for k, s in enumerate(plan["stages"]):
        w = []
        # "parts" (a DP group over several meshes) runs: launch.sh places
        # each part's ranks on its mesh (placed() below checks it); "group"
        # (ministages sharing devices) runs: launch.sh co-locates a group's
        # ranks (tests/stages/test_stages_ministages.py)
        if w:
            need[k] = w
        if s.get("pipe", 0) > 0:
            meshes[s["pipe"]] = 1
    # pipelines that do not line up run (test_stages_pipes.py), but not with
    # a stage cutting a gradient its own way: ZeRO, TP or offload
    cut = any(s.get("zero", 0) > 0 or s.get("tp", 1) > 1 or s.get("offload") or
              s.get("group", 0) > 0 for s in plan["stages"])
    if len(meshes) > 1 and not lined_up(plan) and cut:
        whole = [f"{len(meshes)} pipelines", "own stage boundaries", "all-reduced"]
    return need, whole


def uneven_rows(plan):
    """The first stage whose dp exceeds a microbatch's rows (a DP rank without
    a row; a dp that does not divide them runs: uneven DP), or None."""
    rows = plan["global_batch"] // plan["microbatches"]
    return next((k for k, s in enumerate(plan["stages"]) if s["dp"] > rows), None)


def refusal_names_forms(label, err, plan):
    need, whole = forms_of(plan)
    if not need and not whole and uneven_rows(plan) is not None:
        k = uneven_rows(plan)
        dp = plan["stages"][k]["dp"]
        for wd in (f'stages[{k}]."dp" {dp} exceeds', "would hold no row"):
            check(wd in err, f"{label}: the refusal does not name {wd!r}: {err.strip()[-400:]}")
        return
    check(bool(need or whole), f"{label}: refused though plan.json records no form the "
          f"binaries lack: {err.strip()[-400:]}")
    # offload runs (issue 18 item 4): a refusal names only the forms still missing
    check("CPU offload" not in err, f"{label}: the refusal names CPU offload: {err.strip()[-400:]}")
    for k, words in need.items():
        s = plan["stages"][k]
        head = f"stage {k} (layers {s['layers'][0]}-{s['layers'][1]}) needs"
        check(head in err, f"{label}: the refusal does not name {head!r}: {err.strip()[-400:]}")
        for wd in words:
            check(wd in err, f"{label}: the refusal of stage {k} does not name {wd!r}")
    for wd in whole:
        check(wd in err, f"{label}: the refusal does not name {wd!r}: {err.strip()[-400:]}")
    return sorted(need), bool(whole)


def placed(label, plan, out):
    """launch.sh's rank_mesh gives every rank the mesh plan.json puts it on:
    a stage's DP ranks x TP in order, a stage with parts part by part."""
    sh = open(os.path.join(out, "launch.sh")).read()
    names = re.search(r"^mesh_names=\(([^)]*)\)", sh, re.M)
    rm = re.search(r"^rank_mesh=\(([^)]*)\)", sh, re.M)
    if not check(names and rm, f"{label}: launch.sh has no mesh_names / rank_mesh"):
        return
    names = [n.strip('"') for n in names.group(1).split()]
    got = [names[int(k)] for k in rm.group(1).split()]
    want = []
    # pipelines that line up: stage k holds pipeline 1's ranks, then pipeline 2's, ...
    order = ([p[k] for k in range(len(pipelines(plan)[0])) for p in pipelines(plan)]
             if lined_up(plan) else plan["stages"])
    for s in order:
        parts = s.get("parts") or [{"mesh": s["mesh"], "devices": s["dp"] * s["tp"]}]
        for q in parts:
            want += [q["mesh"]] * q["devices"]
    check(got == want, f"{label}: launch.sh places ranks on {got}, plan.json on {want}")
    for k, s in enumerate(plan["stages"]):
        check(min(s.get("rows", [1])) >= 1, f"{label}: stage {k} rows {s.get('rows')}: a DP "
              f"rank without a row")


def grad_norms(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", text, re.M)}


refs = {}
summary = []
for cluster, name in CASES:
    label = f"{cluster} {name}"
    tag = f"{cluster.split('.')[0]}_{name}"
    plan = plan_with(name, cluster, t.path("plan_" + tag))
    if plan is None:
        summary.append((cluster, name, "no feasible plan (memory: the planner models no offload)"
                        if (cluster, name) in NO_PLAN else "no plan.json"))
        continue
    if (cluster, name) in OFFLOAD:
        check(all(st.get("offload") for st in plan["stages"]) and
              any(st.get("group", 0) > 0 for st in plan["stages"]),
              f"{label}: not every stage offloaded, or no ministages sharing devices")
    rows = plan["global_batch"] // plan["microbatches"]
    B = plan["microbatches"]
    check(plan["global_batch"] == t.gb, f"{label}: plan.json global_batch {plan['global_batch']}")
    k = uneven_rows(plan)
    check(k is None, f"{label}: the planner chose stage {k}'s dp "
          f"{plan['stages'][k]['dp'] if k is not None else 0} over {rows} rows (a DP rank without "
          f"a row)")
    out = t.path("build_" + tag)
    p = t.compile(out, "--plan", os.path.join(t.path("plan_" + tag), "plan.json"),
                  cluster=cluster, mb=rows, quiet=True)
    if (cluster, name) in MISALIGNED:
        # two pipelines of different stage counts or cuts (lined_up: the same
        # cuts), each holding every layer once
        top = max(s["layers"][1] for s in plan["stages"])
        whole = all(sorted(x for s in q for x in range(s["layers"][0], s["layers"][1] + 1))
                    == list(range(1, top + 1)) for q in pipelines(plan))
        check(len(pipelines(plan)) == 2 and not lined_up(plan) and whole,
              f"{label}: the plan is not two pipelines with their own stage boundaries "
              f"(holder sets {holder_text(plan)})")
    if (cluster, name) in UNEVEN:
        check(any(rows % st["dp"] for st in plan["stages"]),
              f"{label}: no stage's dp leaves the {rows} rows uneven")
    need, whole = forms_of(plan)
    shape = " | ".join(f"{s['layers'][0]}-{s['layers'][1]} {s['mesh']} dp{s['dp']} tp{s['tp']}"
                       + (f" z{s['zero']}" if s.get("zero") else "") for s in plan["stages"])
    if p.returncode:
        err = p.stderr
        print(err.strip()[-1500:], flush=True)
        check(p.returncode in (1, 2) and "Traceback" not in err,
              f"{label}: refusal exit {p.returncode}")
        refusal_names_forms(label, err, plan)
        check((cluster, name) not in MUST_RUN, f"{label}: refused, but it must run")
        summary.append((cluster, name, f"refused ({shape}): " + err.strip().splitlines()[-1][-600:]))
        continue
    check(not need and not whole and uneven_rows(plan) is None,
          f"{label}: compiled a plan recording forms the binaries lack ({need}, {whole}, "
          f"uneven rows at stage {uneven_rows(plan)})")
    placed(label, plan, out)
    if (rows, B) not in refs:
        r = t.train(STEPS, mb=rows, accum=B)
        check(r.returncode == 0, f"hetc train --microbatch {rows} --accum {B} failed")
        refs[(rows, B)] = (losses(r.stdout), grad_norms(r.stdout))
    ref, rnorm = refs[(rows, B)]
    pr = t.launch(out, STEPS, "--checkpoint-dir", t.path("ckpt_" + tag))
    got, w = t.expect_losses(pr, label, ref, n=STEPS)
    # the printed global gradient norms too (6 digits): replicated parameters of TP
    # stages count once, the clipping hetc train applies is the same
    norms = grad_norms(pr.stdout)
    wn = max((abs(v - rnorm.get(k, 1e30)) / max(abs(rnorm.get(k, 1e30)), 1e-30)
              for k, v in norms.items()), default=1.0)
    check(len(norms) == STEPS and wn <= 5e-5, f"{label}: {len(norms)} grad norms, max relative "
          f"difference {wn:.3g} from hetc train's")
    print(f"{label}: {STEPS} steps == hetc train to {w:.2g} relative, grad norms to {wn:.2g}",
          flush=True)
    summary.append((cluster, name, f"compiled ({shape}; {B} microbatches x {rows} rows): "
                    f"{STEPS} steps == hetc train to {w:.2g} relative, grad norms to {wn:.2g}"))

# ministages sharing devices run (test_stages_ministages.py) when a group's
# stages are placed alike: a hand-edited plan.json putting uniform's two
# stages into group 1 compiles with stage 1's ranks on stage 0's devices
# (launch.sh device_of) when both have the same mesh, dp and tp, and is
# refused naming both stages and their placement otherwise
zp = t.path("plan_tiny_hetero_uniform", "plan.json")
if os.path.exists(zp):
    q = json.load(open(zp))
    for st in q["stages"]:
        st["group"] = 1
    path = t.path("plan_grouped.json")
    json.dump(q, open(path, "w"), indent=1)
    rows = q["global_batch"] // q["microbatches"]
    out = t.path("build_grouped")
    p = t.compile(out, "--plan", path, mb=rows, quiet=True)
    a, b = q["stages"][0], q["stages"][1]
    if (a["mesh"], a["dp"], a["tp"]) == (b["mesh"], b["dp"], b["tp"]) and len(q["stages"]) == 2:
        if check(p.returncode == 0, f"grouped: exit {p.returncode}: {p.stderr.strip()[-300:]}"):
            sh = open(os.path.join(out, "launch.sh")).read()
            n = a["dp"] * a["tp"]
            want = " ".join(map(str, list(range(n)) * 2))
            check(f"device_of=({want})" in sh, f"grouped: launch.sh has no device_of=({want})")
    elif check(p.returncode != 0, "a group of stages placed unlike compiled"):
        want = (f'stages[1] ("group" 1) is placed unlike stages[0], the group\'s first '
                f'ministage (mesh {b["mesh"]}, dp {b["dp"]}')
        check(want in p.stderr, f"grouped: {want!r} not said: {p.stderr.strip()[-300:]}")

# pipelines whose stages do not line up (AutoHet's plan on three_mesh with
# pipeline 2's middle boundary moved one layer): they run without TP, ZeRO
# and offload (test_stages_pipes.py); this plan's TP 2 is refused, naming
# both pipelines, the holder sets and each stage's tp
ap = t.path("plan_three_mesh_autohet", "plan.json")
if os.path.exists(ap):
    q = json.load(open(ap))
    ps = pipelines(q)
    if check(len(ps) == 2 and len(ps[1]) >= 3, f"autohet on three_mesh: {len(ps)} pipelines"):
        ps[1][1]["layers"][1] += 1
        ps[1][2]["layers"][0] += 1
        path = t.path("plan_unaligned.json")
        json.dump(q, open(path, "w"), indent=1)
        rows = q["global_batch"] // q["microbatches"]
        p = t.compile(t.path("build_unaligned"), "--plan", path, cluster="three_mesh.yaml",
                      mb=rows, quiet=True)
        cut = forms_of(q)[1]  # the plan-wide words: a stage with TP, ZeRO or offload
        check(bool(cut), "autohet on three_mesh: no TP, ZeRO or offload left to refuse "
              "(test_stages_pipes.py runs such pipelines)")
        if check(p.returncode in (1, 2), "pipelines that do not line up with TP compiled"):
            refusal_names_forms("unaligned", p.stderr, q)
            check("its 2 pipelines cut the model at the same layers" not in p.stderr,
                  "unaligned pipelines said to line up")
            # each layer's all-reduce group: one stage per pipeline (plan_holders.c)
            hs = holder_text(q)
            check(len(holder_sets(q)) > len(ps[0]) and hs in p.stderr,
                  f"unaligned: holder sets '{hs}' not named: {p.stderr.strip()[-600:]}")
            # ZeRO, TP and offload on such pipelines are named by their key
            for k, s in enumerate(q["stages"]):
                if s.get("tp", 1) > 1:
                    check(f'stage {k} (pipeline {s["pipe"]}) "tp" {s["tp"]}' in p.stderr,
                          f"unaligned: stage {k}'s tp not named: {p.stderr.strip()[-600:]}")
        # gpt_tiny as two 2-stage pipelines on tiny_hetero cut after block 1
        # and after block 2, ZeRO-1 on one stage: refused, naming the holder
        # sets and the "zero" key
        q2 = json.loads(json.dumps(q))
        top = max(s["layers"][1] for s in q["stages"])
        two = []
        for pipe, cut in ((1, 3), (2, 4)):
            for k, lay in enumerate(([1, cut], [cut + 1, top])):
                st = json.loads(json.dumps(ps[0][0]))
                st.update({"pipe": pipe, "layers": lay, "tp": 1, "dp": 1, "zero": 0})
                st.pop("parts", None)
                st.pop("rows", None)
                two.append(st)
        two[3]["dp"], two[3]["zero"] = 2, 1
        q2["stages"] = two
        path = t.path("plan_unaligned_zero.json")
        json.dump(q2, open(path, "w"), indent=1)
        p = t.compile(t.path("build_unaligned_zero"), "--plan", path, cluster="three_mesh.yaml",
                      mb=rows, quiet=True)
        if check(p.returncode in (1, 2), "two gpt_tiny pipelines cut apart compiled"):
            hs = holder_text(q2)
            check(hs == f"layers 1-3 on stages 0, 2; layers 4-4 on stages 1, 2; "
                  f"layers 5-{top} on stages 1, 3" and hs in p.stderr,
                  f"two pipelines: holder sets '{hs}' not named: {p.stderr.strip()[-600:]}")
            check('whole gradients): stage 3 (pipeline 2) "zero" 1' in p.stderr,
                  f"two pipelines: stage 3's zero not named: {p.stderr.strip()[-400:]}")

print(f"\ngpt_tiny (seq 64, global batch {GB}):")
for cluster, name, what in summary:
    print(f"  {cluster:17s} {name:14s} {what}")
t.finish()
