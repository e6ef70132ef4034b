"""bf16 mixed precision with tensor parallelism in stage binaries (issue 17).

tp_shard shards the fp32 graph and the mixed-precision pass runs again on
each TP rank's graph (passes/tp_shard.c), so a bf16-mixed TP stage holds
and computes its rank's slice of every sharded Linear, in bf16, while its
TpCopy / TpAllReduce reduce in fp32.  Oracle: `hetc train --precision
bf16-mixed` (one process, same data order and microbatching).

1. examples/gpt_tiny.onnx on tiny_pair.yaml with the hand-written plan of
   test_stages_tp.py (stage 0: layers 1-9 under TP 2; stage 1: layers
   10-18 under DP 2 x TP 2), compiled with --precision bf16-mixed:
   - every stage has its 12 tpshard records (two blocks' attention and MLP
     weights and biases), as in fp32, and calls the bf16 Linear kernels;
   - 8 steps' losses equal hetc train's within 1e-3 relative (stages_bf16's
     pipeline tolerance: a TP rank's row-parallel GEMM rounds its partial
     sum to bf16 before the fp32 all-reduce, where hetc train rounds the
     whole sum once; the run prints the gap) and differ from fp32's;
   - per-rank model state (weights, gradients, AdamW m and v, as each
     binary's --print-memory prints it): TP 2 is TP 1's less half of the
     sharded parameters' 16 B per element (their sizes from the ONNX file,
     the shards' names from the tpshard records), within 5 %, and the
     same as the fp32 TP 2 compile's (before issue 17's fix a bf16 TP
     stage kept its Linears whole on every rank);
   - the TP 2 run's checkpoint (stored unsharded) resumes under the TP 1
     plan: the resumed step's loss within 1e-3 of hetc train's.
   The same stages with full recompute and ZeRO-2 on the DP 2 x TP 2
   stage: 8 steps within 1e-3.
   One stage holding every layer under TP 2 (the tied table wte sharded
   by vocabulary rows, tp_shard_vocab.c, the loss vocab-parallel): 8 steps
   within 1e-3 of hetc train.
2. three_mesh.yaml: `hetc plan --precision bf16-mixed` with hapt, AutoHet,
   Metis and HeteroAuto plans TP > 1 stages again (as in fp32; before the
   fix every planner planned tp 1 under bf16-mixed); each plan compiles and
   its 4 steps equal hetc train's (same rows per microbatch, accum =
   microbatches) within 1e-3 (the run prints the gap and the tpshard
   records its stages hold).

usage: test_stages_bf16_tp.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import sys

import onnx
from onnx import numpy_helper

import stagetest
from stagetest import StageTest, config_lines, worst_rel

STEPS = 8
BF16 = ["--precision", "bf16-mixed"]
t = StageTest("tiny_pair.yaml", horizon=STEPS + 1)
check = t.check
base_opt = list(stagetest.OPT)
stagetest.OPT = base_opt + BF16  # every compile and hetc train below, unless switched back


def model_state(binary):
    """The per-rank model state bytes binary --print-memory prints."""
    p = t.run([binary, "--print-memory"])
    m = re.search(r"arena \d+ bytes: model state (\d+)", p.stdout)
    check(p.returncode == 0 and m, f"{binary} --print-memory: {p.stdout[-300:]!r}")
    return int(m.group(1)) if m else -1


def shard_elems(binary, numel):
    """(full, this rank's) elements of the binary's tpshard parameters."""
    full = mine = 0
    for rec in config_lines(binary, "tpshard"):
        f = rec.split()
        n, fd = numel[f[1]], int(f[5])
        keep = sum(int(x) for x in f[8::2])
        full += n
        mine += n * keep // fd
    return full, mine


# 1. the hand-written TP plan of test_stages_tp.py, in bf16-mixed
plan = t.planned(t.path("tp1"))
if plan is None:
    sys.exit(1)
check(plan.get("precision") == "bf16-mixed", f"plan.json precision {plan.get('precision')}")
check(len(plan["stages"]) == 2, f"tiny_pair plan has {len(plan['stages'])} stages (want 2)")
q = stagetest.tp_pair(plan)
variants = {}
for tag, tp in (("tp2", 2), ("tp1_same", 1)):
    v = json.loads(json.dumps(q))
    for s in v["stages"]:
        s["tp"] = tp
    variants[tag] = v
qp = {}
for tag, v in variants.items():
    qp[tag] = t.path(tag + ".json")
    json.dump(v, open(qp[tag], "w"), indent=1)
out2 = t.path("tp2")
p = t.compile(out2, "--plan", qp["tp2"])
if not check(p.returncode == 0, f"hetc compile --precision bf16-mixed --plan (TP 2) exit "
                                f"{p.returncode}: {p.stderr[-500:]}"):
    t.finish()
out1 = t.path("tp1_same")
p1 = t.compile(out1, "--plan", qp["tp1_same"])
check(p1.returncode == 0, f"hetc compile --plan (the same stages at TP 1) exit {p1.returncode}")
stagetest.OPT = base_opt
out32 = t.path("tp2_fp32")
v32 = dict(variants["tp2"], precision="fp32")
json.dump(v32, open(t.path("tp2_fp32.json"), "w"), indent=1)
p32 = t.compile(out32, "--plan", t.path("tp2_fp32.json"))
check(p32.returncode == 0, f"hetc compile fp32 --plan (TP 2) exit {p32.returncode}")
ref32 = t.reference(STEPS + 1)
stagetest.OPT = base_opt + BF16

numel = {i.name: int(numpy_helper.to_array(i).size)
         for i in onnx.load(stagetest.MODEL).graph.initializer}
for k in range(2):
    b = os.path.join(out2, f"stage_{k}")
    shards = config_lines(b, "tpshard")
    check(len(shards) == 12, f"bf16 stage_{k}: {len(shards)} tpshard records (want 12)")
    data = open(b, "rb").read()
    check(b"hk_linear_bf16" in data and b"hk_linear_backward_bf16" in data,
          f"bf16 TP stage_{k} does not call the bf16 Linear kernels")
    st2, st1 = model_state(b), model_state(os.path.join(out1, f"stage_{k}"))
    st32 = model_state(os.path.join(out32, f"stage_{k}")) if p32.returncode == 0 else -1
    full, mine = shard_elems(b, numel)
    want = st1 - 16 * (full - mine)  # param, gradient, m and v: 4 B each
    check(full > 0 and mine * 2 == full, f"stage_{k}: TP 2 keeps {mine} of {full} elements")
    check(abs(st2 - want) <= 0.05 * want,
          f"stage_{k}: bf16 TP 2 model state {st2} B, TP 1's {st1} B less half the sharded "
          f"parameters' state: {want} B")
    check(st2 == st32, f"stage_{k}: bf16 TP 2 model state {st2} B, fp32 TP 2's {st32} B")
    print(f"stage_{k}: per-rank model state bf16 TP 1 {st1 / 2**20:.3f} MiB, TP 2 "
          f"{st2 / 2**20:.3f} MiB (fp32 TP 2 {st32 / 2**20:.3f}); sharded parameters "
          f"{4 * full / 2**20:.3f} MiB whole, {4 * mine / 2**20:.3f} MiB per rank "
          f"({mine / full:.2f})", flush=True)

ref = t.reference(STEPS + 1)
ck = t.path("ckpt")
got, w = t.expect_run(out2, STEPS, ref, "bf16-mixed TP 2 run", "--checkpoint-dir", ck, tol=1e-3)
d32 = worst_rel(got, ref32)
check(d32 > 1e-5, f"bf16-mixed TP losses equal fp32 hetc train's ({d32:.2g})")
print(f"bf16-mixed TP 2 / DP 2 x TP 2: {STEPS} steps within {w:.2g} of hetc train bf16-mixed "
      f"(fp32 hetc train {d32:.2g} away)", flush=True)
if p1.returncode == 0:
    shutil.copytree(ck, t.path("ckpt_tp1"))
    r = t.launch(out1, STEPS + 1, "--checkpoint-dir", t.path("ckpt_tp1"), "--resume")
    more, wr = t.expect_losses(r, "resumed under TP 1", ref, steps=[STEPS + 1], tol=1e-3)
    print(f"the TP 2 checkpoint resumed under TP 1: step {STEPS + 1} loss {more.get(STEPS + 1)} "
          f"within {wr:.2g} of hetc train", flush=True)

# the same stages with full recompute on both and ZeRO-2 in stage 1's DP
# group (stages_intra's combination): the recomputed forward re-runs the
# rank's Casts, ZeRO reduces the fp32 gradients in another order
vi = json.loads(json.dumps(variants["tp2"]))
for s in vi["stages"]:
    s["recompute"] = "full"
vi["stages"][1]["zero"] = 2
json.dump(vi, open(t.path("tp2_intra.json"), "w"), indent=1)
outi = t.path("tp2_intra")
p = t.compile(outi, "--plan", t.path("tp2_intra.json"))
if check(p.returncode == 0, f"hetc compile --plan (TP 2, recompute, ZeRO-2) exit {p.returncode}"):
    got, w = t.expect_losses(t.launch(outi, STEPS), "bf16-mixed TP 2 + recompute + ZeRO-2", ref,
                             n=STEPS, tol=1e-3)
    print(f"bf16-mixed TP 2 + full recompute + ZeRO-2: {STEPS} steps within {w:.2g} of hetc "
          f"train", flush=True)

# one stage holding every layer under TP 2: the tied table wte sharded by
# vocabulary rows (tp_shard_vocab.c), the head's bf16 weight copy a Cast of
# the rank's rows, the loss vocab-parallel
json.dump(stagetest.one_stage(plan, 2), open(t.path("one_tp2.json"), "w"), indent=1)
outv = t.path("one_tp2")
p = t.compile(outv, "--plan", t.path("one_tp2.json"))
if check(p.returncode == 0, f"hetc compile --plan (one stage, TP 2) exit {p.returncode}"):
    recs = [r.split() for r in config_lines(os.path.join(outv, "stage_0"), "tpshard")]
    wte = [r for r in recs if r[1] == "wte.weight"]
    check(wte and wte[0][3] == "0", f"one stage under TP 2: wte.weight not split by vocabulary "
                                    f"rows: {wte}")
    got, w = t.expect_losses(t.launch(outv, STEPS), "bf16-mixed, one vocab-parallel TP 2 stage",
                             ref, n=STEPS, tol=1e-3)
    print(f"bf16-mixed, one stage under TP 2 ({len(recs)} tpshard records, wte.weight by "
          f"vocabulary rows): {STEPS} steps within {w:.2g} of hetc train", flush=True)

# 2. three_mesh: every planner that picked TP there in fp32 plans it under
# bf16-mixed too, and the plan compiles and trains
tm = "three_mesh.yaml"
t.cluster = tm
T = 4
for planner in ("hapt", "autohet", "metis", "heteroauto"):
    d = t.path("tm_" + planner)
    p = t.run([t.hetc, "plan", stagetest.MODEL, os.path.join(stagetest.CLUSTERS, tm), "--seq",
               str(t.seq), "--microbatch", str(t.mb), "--global-batch", str(t.gb), *BF16,
               "--planner=" + planner, "-o", d])
    if not check(p.returncode == 0, f"hetc plan --precision bf16-mixed --planner={planner} on "
                                    f"three_mesh exit {p.returncode}"):
        continue
    pl = json.load(open(os.path.join(d, "plan.json")))
    tps = [s.get("tp", 1) for s in pl["stages"]]
    if not check(any(x > 1 for x in tps), f"{planner}'s bf16-mixed three_mesh plan has tp {tps}"):
        continue
    K = pl["microbatches"]
    out = t.path("tm_" + planner + "_build")
    p = t.compile(out, "--plan", os.path.join(d, "plan.json"), mb=t.gb // K, steps=T)
    if not check(p.returncode == 0, f"hetc compile of {planner}'s bf16-mixed three_mesh plan "
                                    f"exit {p.returncode}"):
        continue
    nsh = sum(len(config_lines(os.path.join(out, f), "tpshard")) for f in os.listdir(out)
              if re.fullmatch(r"stage_\d+", f))
    reft = t.reference(T, mb=t.gb // K, accum=K)
    got, w = t.expect_losses(t.launch(out, T), f"{planner}'s bf16-mixed three_mesh plan", reft,
                             n=T, tol=1e-3)
    print(f"{planner}'s bf16-mixed three_mesh plan (tp {tps}, {nsh} tpshard records): {T} steps "
          f"within {w:.2g} of hetc train", flush=True)
t.finish()
