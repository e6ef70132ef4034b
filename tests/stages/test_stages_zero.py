"""ZeRO (optimizer-state and gradient sharding) in stage binaries (issue 9).

The example GPT (examples/gpt_tiny.onnx) on examples/clusters/tiny_hetero.yaml
(3 stages, one of them DP = 2): hetc compile's plan, then the same plan with
"zero": 2 and with "zero": 1 on the DP = 2 stage (hetc compile --plan FILE).
Both reduce-scatter the gradients, run AdamW on the rank's flat 1/2 slice
of every parameter (m and v hold the slice only: the optimizer state in
stages.txt halves, plus the parameter slice the update runs on) and
all-gather the parameters.  ZeRO-1 keeps whole gradient accumulators and
reduce-scatters once per step; ZeRO-2 reduce-scatters every microbatch's
gradient in the backward (hetrt_accum_scatter) into an accumulator of the
rank's shard only: its gradient bytes - read from the configs' param
records, against sizes recomputed here from numel - are 1/2 of ZeRO-1's.
The stage shares the tied embedding with stage 0, so the cross-stage sum
runs on ZeRO-2 shards.  Oracle: `hetc train`, the single-process trainer,
on the same data order and microbatching: 20 steps' losses of ZeRO-2 and
ZeRO-1 equal it (and each other) to 1e-5 relative, ZeRO-2's printed global
gradient norms (the sum of the shards' squares) to 5e-5 (6 printed digits).
The checkpoint stores whole tensors, so a ZeRO checkpoint resumes under the
zero 0 plan and a zero 0 checkpoint under ZeRO: steps 11..20 (zero 0 from
ZeRO's step 10), step 21 (ZeRO from that run's step 20) and step 21 (zero 0
from ZeRO's step 20) equal hetc train to 1e-5.  A ZeRO-1 binary whose
config is patched to "zero 2" fails naming the stage (its backward calls
hetrt_accum, not the reduce-scatter).  ZeRO-2 on a DP 2 x TP 2
stage (tiny_pair, TP-sharded parameters) for 6 steps.  Last, over DP = 3 (uneven
slices), 6 steps against hetc train: ZeRO-1, and ZeRO-2 with stage 0 also
ZeRO-2 over DP = 2 (two stages holding different shards of the tied
embedding: the cross-stage sum is cut at both stages' slice boundaries).

usage: test_stages_zero.py HETC WORKDIR
"""
import json
import os
import shutil
import sys

import re

from stagetest import StageTest, config_lines, losses, stages_txt, worst_rel

STEPS = 20
# the cosine schedule decays over --steps: compile and train use STEPS + 1
t = StageTest("tiny_hetero.yaml", horizon=STEPS + 1)
check = t.check


def stage_rows(out):
    """stages.txt rows: stage -> (dp, params MiB, grads MiB, optstate MiB)."""
    return {s: (int(f[1]), float(f[3]), float(f[4]), float(f[5]))
            for s, f in stages_txt(out).items()}


def grad_bytes(binary):
    """The stage's gradient accumulator bytes per rank, from its config: the
    accumulators tile [first acc offset, first optimizer state offset)
    (docs/STAGE_ABI.md arena layout); and the params' numel."""
    acc, m, numel = [], [], []
    for rec in config_lines(binary, "param"):
        f = rec.split()
        kv = dict(zip(f[2::2], f[3::2]))
        acc.append(int(kv["acc"]))
        m.append(int(kv["m"]))
        numel.append(int(kv["numel"]))
    return (min(m) - min(acc) if acc else 0), numel


def align(b):
    return (b + 63) // 64 * 64


def grad_norms(text):
    return {int(g.group(1)): float(g.group(2)) for g in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss \S+ \| grad norm (\S+)", text, re.M)}


out0 = t.path("build_zero0")
p = t.compile(out0)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out0, "plan.json")))
dp_stages = [i for i, s in enumerate(plan["stages"]) if s["dp"] == 2]
if not check(len(dp_stages) == 1, f"tiny_hetero plan: DP=2 stages {dp_stages} (want one)"):
    sys.exit(1)
z = dp_stages[0]


def compile_zero(level, plan_name, out_name):
    """the plan with ZeRO `level` on stage z, compiled (LLVM kept)"""
    q = json.loads(json.dumps(plan))
    q["stages"][z]["zero"] = level
    path = t.path(plan_name)
    json.dump(q, open(path, "w"), indent=1)
    out = t.path(out_name)
    p = t.compile(out, "--plan", path, "--emit-llvm")
    if not check(p.returncode == 0, f"hetc compile --plan (zero {level}) exit {p.returncode}"):
        sys.exit(1)
    return path, out


_, out2 = compile_zero(2, "plan_zero.json", "build_zero2")
_, out1 = compile_zero(1, "plan_zero1.json", "build_zero1")

# the config carries the ZeRO records on that stage only
for k in range(len(plan["stages"])):
    zr = config_lines(os.path.join(out2, f"stage_{k}"), "zero")
    check(zr == (["zero 2"] if k == z else []), f"stage_{k}: zero records {zr}")
nsl = len(config_lines(os.path.join(out2, f"stage_{z}"), "zslice"))
npar = len(config_lines(os.path.join(out2, f"stage_{z}"), "param"))
check(nsl == npar and npar > 0, f"stage_{z}: {nsl} zslice records for {npar} params")
# ZeRO-2's backward accumulates every parameter through the reduce-scatter,
# ZeRO-1's through hetrt_accum (the emitted LLVM's calls)
for out, want in ((out2, (npar, 0)), (out1, (0, npar))):
    ll = open(os.path.join(out, f"stage_{z}.ll")).read()
    got = (ll.count("call i32 @hetrt_accum_scatter("), ll.count("call i32 @hetrt_accum("))
    check(got == want, f"{out}: stage_{z} calls hetrt_accum_scatter / hetrt_accum {got} "
                       f"times (want {want})")

# persistent gradient memory: ZeRO-1's accumulators are the whole tensors,
# ZeRO-2's the ceil(numel / 2)-element shards, each 64-byte aligned: 1/dp
g1, n1 = grad_bytes(os.path.join(out1, f"stage_{z}"))
g2, n2 = grad_bytes(os.path.join(out2, f"stage_{z}"))
check(n1 == n2 and n1, f"stage {z}: params {n1} (zero 1) / {n2} (zero 2)")
check(g1 == sum(align(4 * n) for n in n1), f"stage {z}: zero 1 gradient bytes {g1}")
check(g2 == sum(align(4 * -(-n // 2)) for n in n2), f"stage {z}: zero 2 gradient bytes {g2}")
check(g1 > 0 and abs(2 * g2 - g1) <= 2 * 64 * len(n1),
      f"stage {z}: zero 2 gradient bytes {g2} not 1/2 of zero 1's {g1}")
print(f"stage {z} gradient accumulators: {g1} bytes (zero 1) -> {g2} bytes (zero 2)", flush=True)

# memory: same parameters and gradients; the optimizer state (m, v and the
# parameter slice: 3 slices of 1/2) is 3/4 of m + v whole, to alignment
# (stages.txt: MiB to 2 decimals; gradients halve under zero 2 only)
r0, r1, r2 = stage_rows(out0), stage_rows(out1), stage_rows(out2)
check(z in r0 and z in r1 and z in r2, f"stages.txt rows {r0} / {r1} / {r2}")
if z in r0 and z in r1 and z in r2:
    (_, pa0, gr0, op0), (_, pa1, gr1, op1), (_, pa2, gr2, op2) = r0[z], r1[z], r2[z]
    check(pa0 == pa1 == pa2 and gr0 == gr1, f"stage {z}: params/grads changed {r0[z]} -> "
                                            f"{r1[z]} (zero 1) / {r2[z]} (zero 2)")
    check(abs(gr2 - gr0 / 2) <= 0.01, f"stage {z}: grads {gr0} MiB -> {gr2} MiB (want 1/2)")
    check(op1 == op2 and abs(op2 - 0.75 * op0) <= 0.02 * op0 + 0.01,
          f"stage {z}: optimizer state {op0} MiB -> {op1} / {op2} MiB (want 3/4)")
    print(f"stage {z} optimizer state: {op0} MiB (zero 0) -> {op2} MiB (zero 1, 2); "
          f"grads {gr0} -> {gr2} MiB (zero 2)", flush=True)

ref = t.train(STEPS + 1)
check(ref.returncode == 0, "hetc train failed")
ref_l, ref_n = losses(ref.stdout), grad_norms(ref.stdout)
check(len(ref_l) == STEPS + 1 and len(ref_n) == STEPS + 1,
      f"hetc train printed {len(ref_l)} losses, {len(ref_n)} norms")

ck = t.path("ckpt")
p = t.launch(out2, STEPS, "--checkpoint-dir", ck, "--checkpoint-every", str(STEPS // 2))
zl, w = t.expect_losses(p, "zero 2 run", ref_l, n=STEPS)
print(f"zero 2 run: {len(zl)} steps == hetc train to {w:.2g} relative "
      f"(step 1 {zl.get(1)}, step {STEPS} {zl.get(STEPS)})", flush=True)
check(zl.get(STEPS, 99) < zl.get(1, 0), "loss is not falling")
zn = grad_norms(p.stdout)
wn = worst_rel(zn, ref_n)
check(len(zn) == STEPS and wn <= 5e-5, f"zero 2 grad norms vs hetc train: {wn:.3g} > 5e-5")
print(f"zero 2 run: grad norms == hetc train to {wn:.2g} relative", flush=True)

# ZeRO-1 on the same plan: equal to hetc train and to ZeRO-2
p = t.launch(out1, STEPS, "--checkpoint-dir", t.path("ckpt1"))
z1, w5 = t.expect_losses(p, "zero 1 run", ref_l, n=STEPS)
w6 = worst_rel(zl, z1)
check(len(z1) == STEPS and w6 <= 1e-5, f"zero 2 vs zero 1 losses: {w6:.3g} > 1e-5")
print(f"zero 1 run: {len(z1)} steps == hetc train to {w5:.2g}, == zero 2 to {w6:.2g}",
      flush=True)

# a zero 2 config on a backward that still calls hetrt_accum (whole
# accumulators: an older compiler's ZeRO-2) is refused, naming the stage
bad = t.path("build_zero1_as_2")
shutil.copytree(out1, bad)
bb = os.path.join(bad, f"stage_{z}")
data = open(bb, "rb").read()
check(data.count(b"\nzero 1\n") == 1, f"stage_{z}: one 'zero 1' record in the binary")
open(bb, "wb").write(data.replace(b"\nzero 1\n", b"\nzero 2\n"))
p = t.launch(bad, 1, "--checkpoint-dir", t.path("ckpt_bad"), quiet=True)
check(p.returncode != 0 and f"stage {z}: zero 2, but its backward calls hetrt_accum"
      in p.stdout + p.stderr, f"zero 2 config on a hetrt_accum backward: exit {p.returncode}, "
      f"{(p.stdout + p.stderr)[-400:]}")

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

# ZeRO-2 on a stage with TP: tiny_pair, stage 0 (layers 1-9) TP = 2, stage 1
# (layers 10-18, the head, the tied embedding) DP = 2 x TP = 2 with zero 2:
# its TP-sharded parameters' shards are over the TP-local tensors (the DP
# groups are the ranks of equal TP rank), the replicated embedding's
# cross-stage sum runs on shards from TP rank 0s.  6 steps vs hetc train.
outp = t.path("build_pair")
p = t.compile(outp, cluster="tiny_pair.yaml")
if check(p.returncode == 0, f"hetc compile (tiny_pair) exit {p.returncode}"):
    qp = json.load(open(os.path.join(outp, "plan.json")))
    if check(len(qp["stages"]) == 2, f"tiny_pair plan: {len(qp['stages'])} stages (want 2)"):
        qp["stages"][0].update(layers=[1, 9], dp=1, tp=2, warmup=2)
        qp["stages"][1].update(layers=[10, 18], dp=2, tp=2, warmup=1, zero=2)
        planp = t.path("plan_pair_tp_zero2.json")
        json.dump(qp, open(planp, "w"), indent=1)
        outq = t.path("build_pair_tp_zero2")
        p = t.compile(outq, "--plan", planp, cluster="tiny_pair.yaml")
        if check(p.returncode == 0, f"hetc compile --plan (TP + zero 2) exit {p.returncode}"):
            b1 = os.path.join(outq, "stage_1")
            nts = len(config_lines(b1, "tpshard"))
            check(config_lines(b1, "zero") == ["zero 2"] and nts > 0,
                  f"stage_1: zero records {config_lines(b1, 'zero')}, {nts} tpshard records")
            p = t.launch(outq, 6, "--checkpoint-dir", t.path("ckpt_pair"))
            _, w8 = t.expect_losses(p, "TP 2 + zero 2", ref_l, steps=range(1, 7))
            print(f"zero 2 on a DP 2 x TP 2 stage ({nts} TP-sharded parameters): 6 steps == "
                  f"hetc train to {w8:.2g}", flush=True)

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

    # ZeRO-2 over dp 3 here and over dp 2 on stage 0, which also holds the
    # tied embedding: the two stages' shards of its gradient differ
    # (65536 elements: 2 x 32768 and 21846 + 2 x 21845), so the cross-stage
    # sum runs in 4 pieces
    q4 = json.loads(json.dumps(q3))
    q4["stages"][z].update(zero=2)
    q4["stages"][0].update(dp=2, zero=2)
    plan4 = t.path("plan_zero2_dp3.json")
    json.dump(q4, open(plan4, "w"), indent=1)
    out4 = t.path("build_zero2_dp3")
    p = t.compile(out4, "--plan", plan4, mb=6, gb=24, steps=6)
    if check(p.returncode == 0, f"hetc compile --plan (zero 2, dp 2 and 3) exit {p.returncode}"):
        zr = [config_lines(os.path.join(out4, f"stage_{k}"), "zero") for k in (0, z)]
        check(zr == [["zero 2"], ["zero 2"]], f"zero records of stages 0 and {z}: {zr}")
        p = t.launch(out4, 6, "--checkpoint-dir", t.path("ckpt4"))
        _, w7 = t.expect_losses(p, "zero 2 dp 2 + dp 3", r3, n=6)
        print(f"zero 2 over dp 2 (stage 0) and dp 3 (stage {z}): 6 steps == hetc train "
              f"to {w7:.2g}", flush=True)

t.finish()
