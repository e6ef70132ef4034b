"""The bf16 gradient wire (issue 17: "gradient reduction in fp32 with a
documented bf16 option"): gpt_tiny onto tiny_hetero.yaml compiled with
--precision bf16-mixed --grad-reduce-dtype bf16, 8 steps through launch.sh:

  - the planner's plan (its blocks' stage at DP 2, the tied embedding /
    head weight shared by the first and last stages) and the same plan with
    ZeRO-2 on the DP 2 stage (its gradients reduce-scattered in bf16): every
    stage binary carries the `grad_reduce bf16` config record, and the
    losses follow `hetc train --precision bf16-mixed` (one process, so no
    reduction at all) within 5e-3 relative, as the fp32-wire plan must
    (test_stages_bf16.py);
  - step 1's loss prints the same as the fp32-wire run's (the reduction
    only moves the update), later steps differ from it (a wire that did
    not round, or was not used, fails);
  - --grad-reduce-dtype bf16 without bf16-mixed, and an unknown dtype, are
    refused with exit 2 naming the option.

The wire's arithmetic itself is checked against an RNE oracle by the
runtime_bf16_wire tests.

usage: test_stages_bf16_reduce.py HETC WORKDIR
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
stagetest.OPT = base_opt + ["--precision", "bf16-mixed"]

out32 = t.path("wire_fp32")
p = t.compile(out32)
if check(p.returncode == 0, f"hetc compile --precision bf16-mixed exit {p.returncode}"):
    plan = json.load(open(os.path.join(out32, "plan.json")))
    K = plan["microbatches"]
    dps = [s["dp"] for s in plan["stages"]]
    check(max(dps) > 1, f"tiny_hetero's bf16-mixed plan has no DP > 1 stage ({dps})")
    ref = t.reference(STEPS, accum=K)
    r32 = t.launch(out32, STEPS, timeout=600)
    got32, w32 = t.expect_losses(r32, "bf16-mixed, fp32 wire", ref, n=STEPS, tol=5e-3)
    t32 = stagetest.losses(r32.stdout, as_text=True)

    z = dps.index(max(dps))
    qz = json.loads(json.dumps(plan))
    qz["stages"][z]["zero"] = 2
    qpath = t.path("plan_zero2.json")
    json.dump(qz, open(qpath, "w"))
    for label, extra in (("the planner's plan", ()), (f"ZeRO-2 on stage {z}", ("--plan", qpath))):
        out = t.path("wire_bf16_" + ("zero" if extra else "plan"))
        p = t.compile(out, "--grad-reduce-dtype", "bf16", *extra)
        if not check(p.returncode == 0, f"{label}: hetc compile --grad-reduce-dtype bf16 exit "
                                        f"{p.returncode}"):
            continue
        recs = [stagetest.config_lines(os.path.join(out, f"stage_{k}"), "grad_reduce")
                for k in range(len(dps))]
        check(all(r == ["grad_reduce bf16"] for r in recs), f"{label}: grad_reduce records {recs}")
        r = t.launch(out, STEPS, timeout=600)
        got, w = t.expect_losses(r, f"bf16-mixed, bf16 wire, {label}", ref, n=STEPS, tol=5e-3)
        tb = stagetest.losses(r.stdout, as_text=True)
        check(tb.get(1) is not None and tb.get(1) == t32.get(1),
              f"{label}: step 1 loss {tb.get(1)} != the fp32 wire's {t32.get(1)}")
        diff = [k for k in range(2, STEPS + 1) if tb.get(k) != t32.get(k)]
        check(diff, f"{label}: steps 2-{STEPS} print the fp32 wire's losses: the bf16 wire "
                    "changed nothing")
        d = stagetest.worst_rel(got, got32)
        print(f"bf16 wire, {label}: vs hetc train {w:.2g}, vs the fp32 wire {d:.2g} "
              f"(steps differing: {diff}); fp32 wire vs hetc train {w32:.2g}", flush=True)
stagetest.OPT = base_opt

p = t.compile(t.path("refuse32"), "--grad-reduce-dtype", "bf16", quiet=True)
check(p.returncode == 2 and "--grad-reduce-dtype bf16 needs --precision bf16-mixed" in p.stderr
      and not os.path.exists(t.path("refuse32")),
      f"--grad-reduce-dtype bf16 under fp32: exit {p.returncode}: {p.stderr[-300:]}")
p = t.compile(t.path("refuse_fp8"), "--grad-reduce-dtype", "fp8", quiet=True)
check(p.returncode == 2 and re.search(r"--grad-reduce-dtype fp8: expected fp32 or bf16", p.stderr),
      f"--grad-reduce-dtype fp8: exit {p.returncode}: {p.stderr[-300:]}")
t.finish()
