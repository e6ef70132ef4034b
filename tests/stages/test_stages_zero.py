"""ZeRO (optimizer-state sharding) in stage binaries (issue 9).

The example GPT (examples/gpt_tiny.onnx) on examples/clusters/tiny_hetero.yaml
(3 stages, one of them DP = 2): hetc compile's plan, then the same plan with
"zero": 2 on the DP = 2 stage (hetc compile --plan FILE).  That stage
reduce-scatters its gradients, runs AdamW on its flat 1/2 slice of every
parameter (m and v hold the slice only: its optimizer state in stages.txt
halves, plus the parameter slice the update runs on) and all-gathers the
parameters.  Oracle: `hetc train`, the single-process trainer, on the same
data order and microbatching: 20 steps' losses equal to 1e-5 relative.
The checkpoint stores whole tensors, so a ZeRO checkpoint resumes under the
zero 0 plan and a zero 0 checkpoint under ZeRO: steps 11..20 (zero 0 from
ZeRO's step 10), step 21 (ZeRO from that run's step 20) and step 21 (zero 0
from ZeRO's step 20) equal hetc train to 1e-5.  Last, ZeRO-1 over DP = 3
(uneven slices) for 6 steps against hetc train.

usage: test_stages_zero.py HETC WORKDIR
"""
import json
import os
import shutil
import sys

from stagetest import StageTest, config_lines, losses, stages_txt

STEPS = 20
# the cosine schedule decays over --steps: compile and train use STEPS + 1
t = StageTest("tiny_hetero.yaml", horizon=STEPS + 1)
check = t.check


def stage_rows(out):
    """stages.txt rows: stage -> (dp, params MiB, grads MiB, optstate MiB)."""
    return {s: (int(f[1]), float(f[3]), float(f[4]), float(f[5]))
            for s, f in stages_txt(out).items()}


out0 = t.path("build_zero0")
p = t.compile(out0)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out0, "plan.json")))
dp_stages = [i for i, s in enumerate(plan["stages"]) if s["dp"] == 2]
if not check(len(dp_stages) == 1, f"tiny_hetero plan: DP=2 stages {dp_stages} (want one)"):
    sys.exit(1)
z = dp_stages[0]
q = json.loads(json.dumps(plan))
q["stages"][z]["zero"] = 2
plan_path = t.path("plan_zero.json")
json.dump(q, open(plan_path, "w"), indent=1)
out2 = t.path("build_zero2")
p = t.compile(out2, "--plan", plan_path)
if not check(p.returncode == 0, f"hetc compile --plan (zero 2) exit {p.returncode}"):
    sys.exit(1)

# the config carries the ZeRO records on that stage only
for k in range(len(plan["stages"])):
    zr = config_lines(os.path.join(out2, f"stage_{k}"), "zero")
    check(zr == (["zero 2"] if k == z else []), f"stage_{k}: zero records {zr}")
nsl = len(config_lines(os.path.join(out2, f"stage_{z}"), "zslice"))
npar = len(config_lines(os.path.join(out2, f"stage_{z}"), "param"))
check(nsl == npar and npar > 0, f"stage_{z}: {nsl} zslice records for {npar} params")

# memory: same parameters and gradients; the optimizer state (m, v and the
# parameter slice: 3 slices of 1/2) is 3/4 of m + v whole, to alignment
r0, r2 = stage_rows(out0), stage_rows(out2)
check(z in r0 and z in r2, f"stages.txt rows {r0} / {r2}")
if z in r0 and z in r2:
    (_, pa0, gr0, op0), (_, pa2, gr2, op2) = r0[z], r2[z]
    check(pa0 == pa2 and gr0 == gr2, f"stage {z}: params/grads changed {r0[z]} -> {r2[z]}")
    check(abs(op2 - 0.75 * op0) <= 0.02 * op0 + 0.01,
          f"stage {z}: optimizer state {op0} MiB -> {op2} MiB (want 3/4)")
    print(f"stage {z} optimizer state: {op0} MiB (zero 0) -> {op2} MiB (zero 2)", flush=True)

ref_l = t.reference(STEPS + 1)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = t.path("ckpt")
p = t.launch(out2, STEPS, "--checkpoint-dir", ck, "--checkpoint-every", str(STEPS // 2))
zl, w = t.expect_losses(p, "zero 2 run", ref_l, n=STEPS)
print(f"zero 2 run: {len(zl)} steps == hetc train to {w:.2g} relative "
      f"(step 1 {zl.get(1)}, step {STEPS} {zl.get(STEPS)})", flush=True)
check(zl.get(STEPS, 99) < zl.get(1, 0), "loss is not falling")

# whole tensors on disk: ZeRO's step-10 checkpoint resumes under zero 0
# (steps 11..20), and that run's step-20 checkpoint under zero 2 (step 21)
ck_a = t.path("ckpt_a")
shutil.copytree(ck, ck_a)
shutil.rmtree(os.path.join(ck_a, "step_%08d" % STEPS))
p = t.launch(out0, STEPS, "--checkpoint-dir", ck_a, "--resume")
mid, w1 = t.expect_losses(p, f"zero 0 resume of ZeRO's step {STEPS // 2} checkpoint", ref_l,
                          steps=range(STEPS // 2 + 1, STEPS + 1))
print(f"zero 0 from ZeRO's step {STEPS // 2}: steps {min(mid or [0])}..{max(mid or [0])} == "
      f"hetc train to {w1:.2g}", flush=True)
p = t.launch(out2, STEPS + 1, "--checkpoint-dir", ck_a, "--resume")
_, w3 = t.expect_losses(p, "zero 2 resume of a zero 0 checkpoint", ref_l, steps=[STEPS + 1])
print(f"zero 2 from zero 0's step {STEPS}: step {STEPS + 1} == hetc train to {w3:.2g}",
      flush=True)

# ZeRO's own step-20 checkpoint resumes under zero 0
p = t.launch(out0, STEPS + 1, "--checkpoint-dir", ck, "--resume")
more, w2 = t.expect_losses(p, "resume under zero 0", ref_l, steps=[STEPS + 1])
print(f"resumed under zero 0: step {STEPS + 1} loss {more.get(STEPS + 1)} == hetc train "
      f"to {w2:.2g}", flush=True)

# ZeRO-1 over 3 DP ranks: no parameter of that stage splits evenly (wte's
# 65536 and ln_f's 128 elements), so the ranks' slices differ in length and
# the update graph's padded tail is exercised.  Microbatch 6 (dp divides it),
# 6 steps vs hetc train.
out3 = t.path("build_zero1_dp3")
q3 = json.loads(json.dumps(plan))
q3["stages"][z].update(dp=3, zero=1)
q3["global_batch"] = 24  # 4 microbatches of 6 rows
plan3 = t.path("plan_zero1_dp3.json")
json.dump(q3, open(plan3, "w"), indent=1)
p = t.compile(out3, "--plan", plan3, mb=6, gb=24, steps=6)
if check(p.returncode == 0, f"hetc compile --plan (zero 1, dp 3) exit {p.returncode}"):
    r3 = losses(t.train(6, mb=6, accum=4).stdout)
    check(len(r3) == 6, f"zero 1 dp 3: hetc train printed {len(r3)} loss lines of 6")
    p = t.launch(out3, 6, "--checkpoint-dir", t.path("ckpt3"))
    _, w4 = t.expect_losses(p, "zero 1 dp 3", r3, n=6)
    print(f"zero 1 over dp 3: 6 steps == hetc train to {w4:.2g}", flush=True)

t.finish()
