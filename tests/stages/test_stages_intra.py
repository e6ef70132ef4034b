"""Intra-op plans together (issue 9): one plan with tensor parallelism in one
stage, ZeRO-2 in another and full activation recompute everywhere.

gpt_tiny on examples/clusters/tiny_hetero.yaml: the planner's plan is edited
(hetc compile --plan FILE): the 16-layer stage gets tp = 2, the DP = 2 stage
zero = 2, every stage recompute = "full".  Oracle: `hetc train` (one
process, same data and microbatching): 20 steps to 1e-5 relative.  Then the
step-10 checkpoint of that run resumes under the planner's own plan (no TP,
no ZeRO, no recompute): steps 11..20 equal hetc train to 1e-5.

usage: test_stages_intra.py HETC WORKDIR
"""
import json
import os
import shutil
import sys

from stagetest import StageTest, head_dp2


t = StageTest("tiny_hetero.yaml", horizon=25)
check = t.check

base = t.path("base")
p = t.compile(base, timeout=900)
if not check(p.returncode == 0, "compile of the planner's plan failed"):
    sys.exit(1)
plan = json.load(open(os.path.join(base, "plan.json")))
st = plan["stages"]
big = head_dp2(st)
dp2 = [s for s in range(len(st)) if st[s]["dp"] == 2 and s != big]
if not check(len(st) >= 3 and dp2, f"expected 3 stages with a DP = 2 stage: {st}"):
    sys.exit(1)
st[big]["tp"] = 2
st[dp2[0]]["zero"] = 2
for s in st:
    s["recompute"] = "full"
edited = t.path("plan.json")
json.dump(plan, open(edited, "w"))
out = t.path("intra")
p = t.compile(out, "--plan", edited, timeout=900)
if not check(p.returncode == 0, "compile of the edited plan failed"):
    sys.exit(1)
ref_l = t.reference(25, accum=4)
ck = t.path("ckpt")
p = t.launch(out, 20, "--checkpoint-dir", ck, "--checkpoint-every", "10")
_, w = t.expect_losses(p, "TP + ZeRO-2 + recompute", ref_l, steps=range(1, 21))
print(f"TP=2 (stage {big}) + ZeRO-2 (stage {dp2[0]}) + full recompute: 20 steps == hetc train "
      f"to {w:.2g}", flush=True)
shutil.rmtree(os.path.join(ck, "step_00000020"), ignore_errors=True)
p = t.launch(base, 20, "--checkpoint-dir", ck, "--resume")
_, w2 = t.expect_losses(p, "resumed under the planner's plan (another TP/DP/ZeRO split)", ref_l,
                        steps=range(11, 21))
print(f"step-10 checkpoint resumed without TP/ZeRO/recompute: steps 11..20 == hetc train to {w2:.2g}")
t.finish()
