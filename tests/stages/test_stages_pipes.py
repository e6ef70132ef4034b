"""Two pipelines whose stages do not line up (issue 18 item 3, AutoHet's DP groups).

A hand-written plan.json on examples/gpt_tiny.onnx (18 layers, seq 64) and
tiny_hetero.yaml: J = 2 pipelines, each a whole copy of the model with its
own stage boundaries, 4 microbatches of 4 rows a step (global batch 16),
each pipeline running 2 rows of every microbatch:

- pipeline 1: stage 0 layers 1-7 (v100), stage 1 layers 8-18 (a100);
- pipeline 2: stage 2 layers 1-4 (v100), stage 3 layers 5-11 (v100,
  DP 2, a row each), stage 4 layers 12-18 (t4): another stage count, so
  another schedule (warm-ups 3, 2, 1 beside 2, 1).

Holder sets (each run of layers held by the same stage of every pipeline),
brute force from plan.json: layers 1-4 on stages 0, 2; 5-7 on 0, 3; 8-11
on 1, 3; 12-18 on 1, 4; gpt_tiny's tied wte (embedding and head) on
stages 0, 1, 2, 4.  Every
stage binary's `shared` records must name exactly these stage sets (the
runtime's cross-stage sum over them is the layer-wise all-reduce), and its
`pipes` record the pipelines' first stages.

Oracle: `hetc train`, one process, microbatches of 4 rows, 4 a step: the
launch.sh run's 10 losses to 1e-5 relative and its printed gradient norms
to 5e-5 (6 digits).  Its step-5 checkpoint (each layer written by one
holder) resumed under the same build, and under the planner's own
one-pipeline plan of the cluster, prints steps 6-10 equal to hetc train's
to 1e-5.

Refused by key: the same pipelines with ZeRO-1 on the DP 2 stage (ZeRO,
TP and offload cut a gradient a stage's own way, not the holder set's);
pipelines whose rows per microbatch do not split evenly.

usage: test_stages_pipes.py HETC WORKDIR
"""
import json
import os
import re
import shutil

from stagetest import StageTest, losses, config_lines

STEPS = 10
t = StageTest("tiny_hetero.yaml", horizon=STEPS)
check = t.check

MESH = {"v100": "V100-32GB", "a100": "A100-80GB", "t4": "T4"}


def plan(stages, gb=16, mbs=4):
    """A plan.json dict: stages as (pipe, layers, mesh, dp, warmup)."""
    st = []
    for k, (pipe, layers, mesh, dp, warm) in enumerate(stages):
        st.append({"index": k, "pipe": pipe, "pipe_microbatches": mbs, "layers": list(layers),
                   "mesh": mesh, "device": MESH[mesh], "submesh": [1, dp], "dp": dp, "tp": 1,
                   "zero": 0, "recompute": "none", "warmup": warm})
    return {"version": 2, "schedule": "h1f1b", "microbatches": mbs, "global_batch": gb,
            "seq": t.seq, "pipes": 2, "stages": st}


def holder_sets(q):
    """{layer run: stages holding it}, brute force: per layer each
    pipeline's stage holding it; runs of equal holders merged."""
    top = max(s["layers"][1] for s in q["stages"])
    out = []
    for lay in range(1, top + 1):
        hold = [k for k, s in enumerate(q["stages"]) if s["layers"][0] <= lay <= s["layers"][1]]
        if out and out[-1][2] == hold:
            out[-1][1] = lay
        else:
            out.append([lay, lay, hold])
    return out


def write(name, q):
    path = t.path(name + ".json")
    json.dump(q, open(path, "w"), indent=1)
    return path


def grad_norms(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", text, re.M)}


q = plan([(1, (1, 7), "v100", 1, 2), (1, (8, 18), "a100", 1, 1),
          (2, (1, 4), "v100", 1, 3), (2, (5, 11), "v100", 2, 2), (2, (12, 18), "t4", 1, 1)])
hs = holder_sets(q)
check([h[2] for h in hs] == [[0, 2], [0, 3], [1, 3], [1, 4]], f"holder sets {hs}")
out = t.path("build")
p = t.compile(out, "--plan", write("plan_pipes", q))
check(p.returncode == 0, f"hetc compile of two unaligned pipelines: exit {p.returncode}")
check("cut the model at the same layers" not in p.stderr, "unaligned pipelines said to line up")

if p.returncode == 0:
    # the config records: every binary the pipelines' first stages, and the
    # shared stage sets = the holder sets (plus the tied wte's four holders)
    want = {tuple(h[2]) for h in hs} | {(0, 1, 2, 4)}
    for k in range(5):
        b = os.path.join(out, f"stage_{k}")
        check(config_lines(b, "pipes") == ["pipes 0 2"],
              f"stage {k}: pipes records {config_lines(b, 'pipes')}")
        sets = {tuple(int(x) for x in ln.split(" stages ")[1].split())
                for ln in config_lines(b, "shared")}
        check(sets == want, f"stage {k}: shared stage sets {sorted(sets)}, the holder sets "
              f"{sorted(want)}")
        rows = config_lines(b, "rows")
        check(rows == ["rows 2"], f"stage {k}: {rows} (a pipeline's 2 rows of a microbatch)")
        # each pipeline's own 1F1B schedule: the stage's warm-up forwards,
        # then a backward and a forward in turn, the last backwards after
        wu, nmb = q["stages"][k]["warmup"], q["microbatches"]
        want_s = [f"F{i}" for i in range(wu)]
        for i in range(nmb):
            want_s += [f"B{i}"] + ([f"F{wu + i}"] if wu + i < nmb else [])
        sp = t.run([b, "--print-schedule"])
        check(sp.stdout.split() == [f"stage", f"{k}", "schedule:"] + want_s,
              f"stage {k}: schedule {sp.stdout.strip()!r}, its pipeline's 1F1B with warm-up "
              f"{wu}: {' '.join(want_s)}")
    r = t.train(STEPS, mb=4, accum=4)
    check(r.returncode == 0, "hetc train failed")
    ref, rnorm = losses(r.stdout), grad_norms(r.stdout)
    ck = t.path("ckpt")
    pr = t.launch(out, STEPS, "--checkpoint-dir", ck, "--checkpoint-every", "5")
    got, w = t.expect_losses(pr, "two unaligned pipelines", ref, n=STEPS)
    norms = grad_norms(pr.stdout)
    wn = max((abs(v - rnorm.get(k, 1e30)) / max(abs(rnorm.get(k, 1e30)), 1e-30)
              for k, v in norms.items()), default=1.0)
    check(len(norms) == STEPS and wn <= 5e-5, f"{len(norms)} grad norms, max relative "
          f"difference {wn:.3g} from hetc train's")
    print(f"two unaligned pipelines: {STEPS} steps == hetc train to {w:.2g} relative, grad "
          f"norms to {wn:.2g}", flush=True)
    check(got.get(STEPS, 99) < got.get(1, 0), "loss is not falling")
    # resume from the step-5 checkpoint: steps 6-10 as hetc train's
    copy = t.path("ckpt_resume")
    shutil.copytree(ck, copy)
    shutil.rmtree(os.path.join(copy, "step_%08d" % STEPS))
    pr = t.launch(out, STEPS, "--checkpoint-dir", copy, "--resume")
    more, w = t.expect_losses(pr, "resumed from step 5", ref, steps=range(6, STEPS + 1))
    print(f"resumed from step 5: steps 6-{STEPS} == hetc train to {w:.2g}", flush=True)
    # the layer files are any plan's: the planner's one-pipeline build resumes them
    one = t.path("build_one")
    if check(t.compile(one).returncode == 0, "hetc compile of the planner's plan failed"):
        copy = t.path("ckpt_resume_one")
        shutil.copytree(ck, copy)
        shutil.rmtree(os.path.join(copy, "step_%08d" % STEPS))
        pr = t.launch(one, STEPS, "--checkpoint-dir", copy, "--resume")
        more, w = t.expect_losses(pr, "resumed under one pipeline", ref,
                                  steps=range(6, STEPS + 1))
        print(f"resumed under the planner's one-pipeline plan: steps 6-{STEPS} == hetc train "
              f"to {w:.2g}", flush=True)

# refused by key: ZeRO on such pipelines (the holder set sums whole gradients)
qz = json.loads(json.dumps(q))
qz["stages"][3]["zero"] = 1
p = t.compile(t.path("build_zero"), "--plan", write("plan_zero", qz), quiet=True)
if check(p.returncode in (1, 2), f"ZeRO on unaligned pipelines: exit {p.returncode}"):
    for wd in ('stage 3 (pipeline 2) "zero" 1', "2 pipelines", "own stage boundaries",
               "layers 1-4 on stages 0, 2; layers 5-7 on stages 0, 3; layers 8-11 on stages 1, "
               "3; layers 12-18 on stages 1, 4"):
        check(wd in p.stderr, f"ZeRO refusal does not name {wd!r}: {p.stderr.strip()[-500:]}")
# rows per microbatch that two pipelines cannot share evenly
qo = json.loads(json.dumps(q))
qo["global_batch"] = 12
p = t.compile(t.path("build_odd"), "--plan", write("plan_odd", qo), gb=12, mb=3, quiet=True)
if check(p.returncode in (1, 2), f"3 rows over 2 pipelines: exit {p.returncode}"):
    check("2 pipelines over microbatches of 3 rows" in p.stderr,
          f"odd rows: refusal {p.stderr.strip()[-400:]}")
t.finish()
