"""Tensor parallelism in stage binaries (issue 9).

The example GPT (examples/gpt_tiny.onnx) on examples/clusters/tiny_pair.yaml
with a hand-edited plan.json (hetc compile --plan FILE): stage 0 (layers
1-9: embedding and two transformer blocks) runs TP = 2, stage 1 (layers
10-18: two blocks, the head and the loss, sharing the tied embedding with
stage 0) runs DP = 2 x TP = 2, so 6 ranks.  Oracle: `hetc train`, the
single-process trainer, on the same data order and microbatching: 20
steps' losses equal to 1e-5 relative.  Then the TP run's final checkpoint
(stored unsharded) resumes under the planner's TP = 1 plan and under the
TP plan itself: step 21's loss equals hetc train's to 1e-5.

usage: test_stages_tp.py HETC WORKDIR
"""
import json
import os
import sys

from stagetest import StageTest, config_lines

STEPS = 20
# the cosine schedule decays over --steps: compile and train use STEPS + 1
t = StageTest("tiny_pair.yaml", horizon=STEPS + 1)
check = t.check


# the planner's plan (TP = 1 everywhere: hetc compile plans without TP unless --max-tp)
out1 = t.path("build_tp1")
plan = t.planned(out1)
if plan is None:
    sys.exit(1)
check(all(s["tp"] == 1 for s in plan["stages"]), "hetc compile planned TP without --max-tp")

# hand-edited: two stages, TP = 2 and DP 2 x TP 2
q = json.loads(json.dumps(plan))
check(len(q["stages"]) == 2, f"tiny_pair plan has {len(q['stages'])} stages (want 2)")
s0, s1 = q["stages"][0], q["stages"][1]
s0.update(layers=[1, 9], dp=1, tp=2, warmup=2)
s1.update(layers=[10, 18], dp=2, tp=2, warmup=1)
q["stages"] = [s0, s1]
plan_path = t.path("plan_tp.json")
json.dump(q, open(plan_path, "w"), indent=1)
out2 = t.path("build_tp2")
p = t.compile(out2, "--plan", plan_path)
if not check(p.returncode == 0, f"hetc compile --plan (TP 2) exit {p.returncode}"):
    sys.exit(1)
launch_text = open(os.path.join(out2, "launch.sh")).read()
check("stages=(2 4)" in launch_text, "launch.sh should run 2 and 4 ranks (dp x tp)")
for k in range(2):
    b = os.path.join(out2, f"stage_{k}")
    tp = config_lines(b, "tp")
    shards = config_lines(b, "tpshard")
    check(any(t.split()[1 + k] == "2" for t in tp), f"stage_{k}: no 'tp' record giving it TP 2: {tp}")
    # two blocks per stage: attention (qkv weight + bias, out weight) and MLP
    # (fc weight + bias, proj weight) sharded in each
    check(len(shards) == 12, f"stage_{k}: {len(shards)} tpshard records (want 12)")

ref_l = t.reference(STEPS + 1)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = t.path("ckpt")
t.expect_run(out2, STEPS, ref_l, "TP 2 run", "--checkpoint-dir", ck)

# the checkpoint is unsharded: it resumes under TP = 1 and under TP = 2
for name, out in (("TP 1", out1), ("TP 2", out2)):
    t.expect_resume(out, ck, t.path("ckpt_" + name.replace(" ", "")), STEPS + 1, ref_l, name)

t.finish()
