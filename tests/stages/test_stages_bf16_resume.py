"""Resuming a bf16-mixed run (issue 17: "resume a bf16 run from a step-10
checkpoint: steps 11-20 identical to the uninterrupted run"; checkpoints
hold the fp32 master weights, so "a bf16 run resumes bit-exactly and can
resume as fp32").  hetc train does not read optimizer state back, so this
runs the stage binaries: gpt_tiny compiled onto one_host.yaml (one stage,
one rank) with --precision bf16-mixed and a 20-step cosine horizon.

  - 20 steps with --checkpoint-every 10 (checkpoints at steps 10 and 20);
    a copy of its checkpoint directory without step 20 resumed to step 20
    prints steps 11-20 only, and their loss and grad-norm text equals the
    uninterrupted run's (the oracle: the uninterrupted run, the same
    binary and data; parameters, AdamW m and v and the step counter all
    come back bit for bit, or a later step's digits differ);
  - the same model compiled with --precision fp32 resumes the same step-10
    checkpoint: it runs steps 11-20, its step-11 loss is within 1e-2
    relative of the bf16 run's step 11 (the same master weights, only the
    GEMM operand rounding differs) and not equal to it (the fp32 binary
    really computed in fp32).

The 3-stage pipeline's bf16 resume is in test_stages_bf16.py.

usage: test_stages_bf16_resume.py HETC WORKDIR
"""
import os
import shutil

import stagetest
from stagetest import StageTest

STEPS, AT = 20, 10
t = StageTest("one_host.yaml", horizon=STEPS)
check = t.check
base_opt = list(stagetest.OPT)


stagetest.OPT = base_opt + ["--precision", "bf16-mixed"]
out16 = t.path("bf16")
p16 = t.compile(out16)
stagetest.OPT = base_opt
out32 = t.path("fp32")
p32 = t.compile(out32, "--precision", "fp32")
if not check(p16.returncode == 0 and p32.returncode == 0,
             f"hetc compile exit {p16.returncode} (bf16-mixed), {p32.returncode} (fp32)"):
    t.finish()

ck = t.path("ckpt")
p = t.launch(out16, STEPS, "--checkpoint-dir", ck, "--checkpoint-every", str(AT))
full = stagetest.step_lines(p.stdout)
if not check(p.returncode == 0 and sorted(full) == list(range(1, STEPS + 1)),
             f"the uninterrupted bf16 run: exit {p.returncode}, steps {sorted(full)}"):
    t.finish()
check(os.path.isdir(os.path.join(ck, "step_%08d" % AT)), f"no step-{AT} checkpoint in {ck}")


def from_step10(label):
    """A copy of the checkpoint directory with only the step-AT checkpoint."""
    d = t.path(label)
    shutil.copytree(ck, d)
    shutil.rmtree(os.path.join(d, "step_%08d" % STEPS), ignore_errors=True)
    return d


d16 = from_step10("ck_bf16")
p = t.launch(out16, STEPS, "--checkpoint-dir", d16, "--resume")
res = stagetest.step_lines(p.stdout)
check("resuming from %s (step %d)" % (os.path.join(d16, "step_%08d" % AT), AT) in p.stdout,
      f"did not say it resumes from step {AT}: {p.stdout[:600]}")
want = {k: v for k, v in full.items() if k > AT}
check(p.returncode == 0 and res == want,
      f"bf16 resumed from step {AT}: exit {p.returncode}; differs from the uninterrupted run at "
      + str([(k, res.get(k), want[k]) for k in want if res.get(k) != want[k]][:4])
      + f" (steps printed {sorted(res)})")
if res == want:
    print(f"bf16-mixed resumed from step {AT}: steps {AT + 1}-{STEPS} loss and grad norm text == "
          f"the uninterrupted run's (step {STEPS}: {want[STEPS]})", flush=True)

p = t.launch(out32, STEPS, "--checkpoint-dir", from_step10("ck_fp32"), "--resume")
r32 = stagetest.step_lines(p.stdout)
ok = check(p.returncode == 0 and sorted(r32) == list(range(AT + 1, STEPS + 1)),
           f"the bf16 checkpoint resumed as fp32: exit {p.returncode}, steps {sorted(r32)}")
if ok:
    a = float(r32[AT + 1].split()[1])
    b = float(full[AT + 1].split()[1])
    rel = abs(a - b) / abs(b)
    check(0 < rel < 1e-2, f"step {AT + 1} resumed as fp32: loss {a} vs bf16's {b} (rel {rel:.3g}; "
          "want 0 < rel < 1e-2: close, and computed in fp32)")
    print(f"the bf16 step-{AT} checkpoint resumed as fp32: step {AT + 1} loss {a} vs bf16's {b} "
          f"(rel {rel:.2g}); step {STEPS} {r32[STEPS]}", flush=True)
t.finish()
