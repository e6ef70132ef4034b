"""Stochastic rounding of the bf16 weight copies (issue 17: "llm.c's
stochastic rounding of the master copy as an option"; hetc compile / train
--bf16-rounding stochastic, passes/stochastic_round.c).  Its bits come
from (the parameter's name, the 0-based step, the element's index), so
every stage split, engine and resumed run must round a weight alike.
gpt_tiny onto tiny_hetero.yaml, --precision bf16-mixed:

  - 3 DP-1 stages (embedding | blocks | head) against `hetc train` with
    the same option: steps 1-2 print the same loss text and step 1 the
    same grad norm (a stage keying or stepping its rounding otherwise
    would differ at step 1: the rounding moves the loss by ~1e-5 and more),
    8 steps within 1e-3 (test_stages_bf16.py's reasons);
  - the executor engine (--engine executor) prints hetc train's step 1 and
    2 too (it rounds in its own Cast adapter with the step it is told);
  - `hetc train` with and without the option differ at step 1 (the rounding
    happened), by less than 1e-2 relative;
  - the 3-stage run's step-4 checkpoint resumed to step 8 prints steps 5-8
    as the uninterrupted run (a resumed run draws the steps' bits again);
  - refused, exit 2 with the option named: --bf16-rounding stochastic with
    --precision fp32 (compile and train), with --interpret-nodes, and an
    unknown value.
The statistics of the rounding itself are tests/kernels/test_hk_bf16.c's;
the criterion against torch's autocast is tests/train/test_train_bf16.py's.

usage: test_stages_bf16_sr.py HETC WORKDIR
"""
import json
import os
import re

import stagetest
from stagetest import StageTest

STEPS = 8
t = StageTest("tiny_hetero.yaml", horizon=STEPS)
check = t.check
base_opt = list(stagetest.OPT)
SR = ["--precision", "bf16-mixed", "--bf16-rounding", "stochastic"]


def grad_norm1(text):
    m = re.search(r"^step\s+1/\d+ \| loss \S+ \| grad norm (\S+)", text, re.M)
    return m.group(1) if m else None


stagetest.OPT = base_opt + SR  # the compiles and hetc train
plan = t.planned(t.path("planned"))
if plan is None:
    t.finish()
K = plan["microbatches"]
rt = t.train(STEPS, accum=K)
reft = stagetest.losses(rt.stdout, as_text=True)
check(rt.returncode == 0 and len(reft) == STEPS, f"hetc train {' '.join(SR)}: exit "
      f"{rt.returncode}, {len(reft)} steps")

# the executor engine: its own Cast adapter, told the step by hetc train
ex = t.run([t.hetc, "train", stagetest.MODEL, "--data", stagetest.DATA, "--steps", "2",
            "--microbatch", str(t.mb), "--accum", str(K), "--seq", str(t.seq), *stagetest.OPT,
            "--no-checkpoint", "--engine", "executor"])
exl = stagetest.losses(ex.stdout, as_text=True)
check(ex.returncode == 0 and [exl.get(k) for k in (1, 2)] == [reft.get(k) for k in (1, 2)] and
      grad_norm1(ex.stdout) == grad_norm1(rt.stdout),
      f"--engine executor: steps 1-2 {exl} vs the compiled engine's {reft}")

# round to nearest: step 1 differs, a little
stagetest.OPT = base_opt + ["--precision", "bf16-mixed"]
near = t.reference(STEPS, accum=K)
stagetest.OPT = base_opt + SR
if reft and near:
    d1 = abs(float(reft[1]) - near[1]) / abs(near[1])
    check(1e-7 < d1 < 1e-2, f"step 1: stochastic {reft[1]} vs nearest {near[1]} (rel {d1:.3g}; "
          "want 1e-7 .. 1e-2)")
    print(f"hetc train: step 1 stochastic {reft[1]}, nearest {near[1]:.8f} (rel {d1:.2g})",
          flush=True)

# three DP-1 stages
q = stagetest.three_stages(plan, [1, 1, 1])
qpath = t.path("three.json")
json.dump(q, open(qpath, "w"))
out3 = t.path("three")
p = t.compile(out3, "--plan", qpath)
if check(p.returncode == 0, f"hetc compile --plan three.json {' '.join(SR)}: exit "
                            f"{p.returncode}"):
    st = open(os.path.join(out3, "stages.txt")).read()
    check("rounded stochastically" in st, "stages.txt does not say the weight copies are "
          "rounded stochastically")
    nsr = sum(b"hetrt_round_bf16_sr" in open(os.path.join(out3, "stage_%d" % s), "rb").read()
              for s in range(3))
    check(nsr >= 2, f"{nsr} stage binaries call hetrt_round_bf16_sr (the blocks and head should)")
    ck3 = t.path("ckpt3")
    p = t.launch(out3, STEPS, "--checkpoint-dir", ck3, "--checkpoint-every", str(STEPS // 2),
                 timeout=600)
    got3, w3 = t.expect_losses(p, "stochastic rounding, 3 DP-1 stages", reft, n=STEPS, tol=1e-3,
                               as_text=True)
    check([got3.get(k) for k in (1, 2)] == [reft.get(k) for k in (1, 2)],
          f"3 DP-1 stages: steps 1-2 print other losses than hetc train: {got3} {reft}")
    check(grad_norm1(p.stdout) == grad_norm1(rt.stdout) and grad_norm1(p.stdout),
          f"step 1 grad norm {grad_norm1(p.stdout)} vs hetc train's {grad_norm1(rt.stdout)}")
    same = t.expect_same_resume(out3, ck3, p, STEPS // 2, STEPS, "3 stages")
    print(f"stochastic rounding: 3 DP-1 stages == hetc train to {w3:.2g} (steps 1-2 and the "
          f"step-1 grad norm as text); resumed from step {STEPS // 2}: steps {STEPS // 2 + 1}-"
          f"{STEPS} {'identical' if same else 'DIFFERENT'}", flush=True)

# refusals
stagetest.OPT = base_opt
bad = [
    ("compile with fp32", t.compile(t.path("bad1"), "--precision", "fp32", "--bf16-rounding",
                                    "stochastic", quiet=True), "--bf16-rounding stochastic"),
    ("train with fp32", t.run([t.hetc, "train", stagetest.MODEL, "--data", stagetest.DATA,
                               "--steps", "1", "--precision", "fp32", "--bf16-rounding",
                               "stochastic", "--no-checkpoint"], quiet=True),
     "--bf16-rounding stochastic"),
    ("compile with --interpret-nodes", t.compile(t.path("bad2"), *SR, "--interpret-nodes",
                                                 quiet=True), "--interpret-nodes"),
    ("an unknown value", t.run([t.hetc, "train", stagetest.MODEL, "--data", stagetest.DATA,
                                "--steps", "1", "--bf16-rounding", "up", "--no-checkpoint"],
                               quiet=True), "--bf16-rounding expects nearest or stochastic"),
]
for what, p, say in bad:
    check(p.returncode != 0 and say in p.stderr,
          f"--bf16-rounding {what}: exit {p.returncode}, stderr {p.stderr[-400:]!r}")
t.finish()
