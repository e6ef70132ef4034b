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
import re
import shutil
import subprocess
import sys

HETC, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")
COMMON = ["--seq", "64", "--microbatch", "4", "--global-batch", "16", "--threads", "2",
          "--steps", "25", "--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(cmd):
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode:
        print(p.stdout[-2000:], p.stderr[-3000:], sep="\n", flush=True)
    return p


def losses(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M)}


def worst(got, ref):
    return max((abs(v - ref[k]) / abs(ref[k]) for k, v in got.items()), default=1.0)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
base = os.path.join(WORK, "base")
p = run([HETC, MODEL, CLUSTER, *COMMON, "-o", base])
if not check(p.returncode == 0, "compile of the planner's plan failed"):
    sys.exit(1)
plan = json.load(open(os.path.join(base, "plan.json")))
st = plan["stages"]
big = max(range(len(st)), key=lambda s: st[s]["layers"][1] - st[s]["layers"][0])
dp2 = [s for s in range(len(st)) if st[s]["dp"] == 2 and s != big]
if not check(len(st) >= 3 and dp2, f"expected 3 stages with a DP = 2 stage: {st}"):
    sys.exit(1)
st[big]["tp"] = 2
st[dp2[0]]["zero"] = 2
for s in st:
    s["recompute"] = "full"
edited = os.path.join(WORK, "plan.json")
json.dump(plan, open(edited, "w"))
out = os.path.join(WORK, "intra")
p = run([HETC, MODEL, CLUSTER, *COMMON, "--plan", edited, "-o", out])
if not check(p.returncode == 0, "compile of the edited plan failed"):
    sys.exit(1)
ref = run([HETC, "train", MODEL, "--data", DATA, "--steps", "25", "--microbatch", "4", "--accum", "4",
           "--seq", "64", "--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine", "--no-checkpoint"])
check(ref.returncode == 0, "hetc train failed")
ref_l = losses(ref.stdout)
ck = os.path.join(WORK, "ckpt")
p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", "20", "--checkpoint-dir", ck,
         "--checkpoint-every", "10"])
check(p.returncode == 0, "launch.sh (TP + ZeRO-2 + recompute) failed")
got = losses(p.stdout)
check(sorted(got) == list(range(1, 21)), f"steps printed: {sorted(got)}")
w = worst(got, ref_l)
check(w <= 1e-5, f"TP + ZeRO-2 + recompute vs hetc train: {w:.3g} > 1e-5")
print(f"TP=2 (stage {big}) + ZeRO-2 (stage {dp2[0]}) + full recompute: 20 steps == hetc train "
      f"to {w:.2g}", flush=True)
shutil.rmtree(os.path.join(ck, "step_00000020"), ignore_errors=True)
p = run([os.path.join(base, "launch.sh"), "--data", DATA, "--steps", "20", "--checkpoint-dir", ck,
         "--resume"])
check(p.returncode == 0, "resume under the planner's plan failed")
more = losses(p.stdout)
check(sorted(more) == list(range(11, 21)), f"steps after resume: {sorted(more)}")
w2 = worst(more, ref_l)
check(w2 <= 1e-5, f"resumed under another TP/DP/ZeRO split: {w2:.3g} > 1e-5")
print(f"step-10 checkpoint resumed without TP/ZeRO/recompute: steps 11..20 == hetc train to {w2:.2g}")
print("FAILED" if failures else "OK", len(failures), "failures")
sys.exit(1 if failures else 0)
