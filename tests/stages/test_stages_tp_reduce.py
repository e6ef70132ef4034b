"""--tp-reduce-dtype bf16: the TP all-reduces of activations and their
gradients sent and summed in bf16 (issue 17's "bf16 option" for the TP
sums; host backend, bf16-mixed only).  Oracle: `hetc train --precision
bf16-mixed` (the executor, one process, no TP) and the same builds with the
default fp32 TP wire.

1. examples/gpt_tiny.onnx on tiny_pair.yaml with test_stages_tp.py's
   hand-written plan (stage 0: layers 1-9 under TP 2; stage 1: layers
   10-18 under DP 2 x TP 2), compiled with --tp-reduce-dtype bf16:
   - both programs' generated code (--emit-llvm) calls
     hetrt_tp_allreduce_bf16 where the fp32-wire build calls
     hetrt_tp_allreduce, and no fp32 sum (no stage of this plan holds the
     vocab-parallel loss), and each config's `tp_reduce bf16 N` is the largest TP sum:
     microbatch rows x seq x hidden elements (4 x 64 x the model's
     hidden size, from the ONNX file);
   - 8 steps follow hetc train within 5e-3 (each partial sum rounded to
     bf16 on the wire, then the sum: the run prints the gap), and step 1
     differs from the fp32-wire build of the same plan (the forward's sums
     are rounded: a bf16 wire that silently stayed fp32 fails here) by
     less than 5e-3;
   - the checkpoint (fp32 master weights) resumes under the fp32-wire
     build: the next step within 5e-3.
2. One stage holding every layer under TP 2 (wte sharded by vocabulary
   rows, the loss vocab-parallel): its LLVM IR (--emit-llvm) calls
   hetrt_tp_allreduce for the loss statistics (VocabCeStats' sum stays
   fp32), hetrt_tp_allreduce_max for the row max, and
   hetrt_tp_allreduce_bf16 for the rest; 8 steps within 5e-3.
3. Refusals (exit 2, nothing written): --tp-reduce-dtype bf16 with
   --precision fp32; hetc plan with it and fp32; an unknown dtype.
   hetc plan --tp-reduce-dtype bf16 writes "tp_reduce_dtype": "bf16" in
   plan.json and says so in plan.txt.

usage: test_stages_tp_reduce.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import sys

import onnx

import stagetest
from stagetest import StageTest, config_lines, worst_rel

STEPS = 8
TOL = 5e-3
BF16 = ["--precision", "bf16-mixed"]
WIRE = ["--tp-reduce-dtype", "bf16"]
t = StageTest("tiny_pair.yaml", horizon=STEPS + 1)
check = t.check
base_opt = list(stagetest.OPT)
stagetest.OPT = base_opt + BF16


TP_FNS = ("hetrt_tp_allreduce", "hetrt_tp_allreduce_max", "hetrt_tp_allreduce_bf16")


def tp_calls(out, k):
    """call sites of each TP entry in stage k's generated code (--emit-llvm)"""
    ll = open(os.path.join(out, f"stage_{k}.ll")).read()
    return {f: len(re.findall(r"call i32 @%s\(" % f, ll)) for f in TP_FNS}


def hidden_size():
    """wpe's second dim: the residual stream's width"""
    for i in onnx.load(stagetest.MODEL).graph.initializer:
        if i.name == "wpe.weight":
            return int(i.dims[1])
    return -1


# 1. the hand-written TP plan, with and without the bf16 TP wire
plan = t.planned(t.path("base"))
if plan is None:
    sys.exit(1)
q = stagetest.tp_pair(plan)
qp = t.path("tp2.json")
json.dump(q, open(qp, "w"), indent=1)
outw, out32 = t.path("tp2_wire"), t.path("tp2_fp32wire")
pw = t.compile(outw, "--plan", qp, "--emit-llvm", *WIRE)
p32 = t.compile(out32, "--plan", qp, "--emit-llvm")
if not check(pw.returncode == 0 and p32.returncode == 0,
             f"hetc compile --plan (TP 2) with / without --tp-reduce-dtype bf16: "
             f"{pw.returncode} {pw.stderr[-500:]} / {p32.returncode}"):
    t.finish()
H = hidden_size()
for k in range(2):
    b = os.path.join(outw, f"stage_{k}")
    c = tp_calls(outw, k)
    check(c["hetrt_tp_allreduce_bf16"] >= 4 and c["hetrt_tp_allreduce"] == 0,
          f"stage_{k}: TP calls {c}; want the bf16 sums alone")
    rec = config_lines(b, "tp_reduce")
    want = 4 * 64 * H // (2 if k else 1)  # stage 1's DP 2 halves its rows
    check(rec == [f"tp_reduce bf16 {want}"], f"stage_{k}: config {rec}, want 'tp_reduce bf16 "
                                             f"{want}' (rows x seq x hidden {H})")
    c32 = tp_calls(out32, k)
    check(c32["hetrt_tp_allreduce"] == c["hetrt_tp_allreduce_bf16"] and
          c32["hetrt_tp_allreduce_bf16"] == 0,
          f"stage_{k} of the fp32-wire build: TP calls {c32} (the bf16 build's {c})")
    check(not config_lines(os.path.join(out32, f"stage_{k}"), "tp_reduce"),
          f"stage_{k} of the fp32-wire build has a tp_reduce record")

ref = t.reference(STEPS + 1)
ck = t.path("ckpt")
got, w = t.expect_run(outw, STEPS, ref, "TP sums in bf16", "--checkpoint-dir", ck, tol=TOL)
got32, w32 = t.expect_run(out32, STEPS, ref, "TP sums in fp32", tol=TOL)
if 1 in got and 1 in got32:
    d1 = abs(got[1] - got32[1]) / abs(got32[1])
    check(0 < d1 < TOL, f"step 1: the bf16 TP wire's loss {got[1]} vs the fp32 wire's "
                        f"{got32[1]} ({d1:.2g}): want different, within {TOL}")
    print(f"TP 2 / DP 2 x TP 2, sums over a bf16 wire: {STEPS} steps within {w:.2g} of hetc "
          f"train bf16-mixed (fp32 wire {w32:.2g}); step 1 {d1:.2g} from the fp32 wire",
          flush=True)
copy = t.path("ckpt_resume")
shutil.copytree(ck, copy)
r = t.launch(out32, STEPS + 1, "--checkpoint-dir", copy, "--resume")
more, wr = t.expect_losses(r, "bf16-wire checkpoint resumed on the fp32 wire", ref,
                           steps=[STEPS + 1], tol=TOL)
print(f"resumed under the fp32-wire build: step {STEPS + 1} within {wr:.2g}", flush=True)

# 2. one stage under TP 2 with the vocab-parallel loss: its statistics stay fp32
json.dump(stagetest.one_stage(plan, 2), open(t.path("one_tp2.json"), "w"), indent=1)
outv = t.path("one_tp2")
p = t.compile(outv, "--plan", t.path("one_tp2.json"), "--emit-llvm", *WIRE)
if check(p.returncode == 0, f"hetc compile --plan (one stage, TP 2) exit {p.returncode}: "
                            f"{p.stderr[-500:]}"):
    calls = tp_calls(outv, 0)
    check(calls["hetrt_tp_allreduce"] >= 1 and calls["hetrt_tp_allreduce_max"] >= 1 and
          calls["hetrt_tp_allreduce_bf16"] >= 4,
          f"one vocab-parallel TP 2 stage: TP calls {calls} (want the loss statistics' fp32 sum, "
          f"the row max and the bf16 sums)")
    got, w = t.expect_losses(t.launch(outv, STEPS), "one vocab-parallel TP 2 stage, bf16 wire",
                             ref, n=STEPS, tol=TOL)
    print(f"one stage under TP 2 (vocab-parallel loss), bf16 wire: TP calls {calls}; {STEPS} "
          f"steps within {w:.2g} of hetc train", flush=True)

# 3. refusals and the plan's record
stagetest.OPT = base_opt
bad = t.path("refused")
for extra, want in ((["--precision", "fp32", *WIRE], "needs --precision bf16-mixed"),
                    (["--tp-reduce-dtype", "fp16"], "expected fp32 or bf16")):
    p = t.compile(bad, *extra)
    check(p.returncode == 2 and want in p.stderr and not os.path.exists(bad),
          f"hetc compile {extra}: want exit 2 saying '{want}', got {p.returncode} "
          f"{p.stderr[-400:]}")
stagetest.OPT = base_opt + BF16
po = t.path("plan_wire")
p = t.run([t.hetc, "plan", stagetest.MODEL, os.path.join(stagetest.CLUSTERS, "tiny_pair.yaml"),
           "--seq", "64", "--microbatch", "4", "--global-batch", "16", *BF16, *WIRE, "-o", po])
if check(p.returncode == 0, f"hetc plan --tp-reduce-dtype bf16: {p.stderr[-400:]}"):
    pj = json.load(open(os.path.join(po, "plan.json")))
    check(pj.get("tp_reduce_dtype") == "bf16", f"plan.json tp_reduce_dtype "
                                               f"{pj.get('tp_reduce_dtype')!r}")
    check("TP sums in bf16" in open(os.path.join(po, "plan.txt")).read(),
          "plan.txt does not say the TP sums are bf16")
t.finish()
