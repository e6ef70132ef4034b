"""Tensor parallelism and ZeRO on the CUDA backend (issue 9 part 5; docs/CUDA.md).

gpt_tiny on examples/clusters/tiny_hetero.yaml (3 stages, DP 1/1/2): the
planner's plan edited like tests/stages/test_stages_intra.py -- the
16-layer stage gets tp = 2, the DP = 2 stage zero = 2 -- and compiled with
--backend=cuda and with the host backend (hetc compile --plan FILE).

usage: test_cuda_tp_zero.py link|e2e HETC WORKDIR

link (every build, no GPU): the CUDA stage binaries link; their config
records (tp, tpshard, zero, zslice) are the host backend's for the same plan
(the oracle: the host runtime runs them, tests/stages); the TP stage's
binary defines hetrt_tp_allreduce and reaches ncclAllReduce, the ZeRO
stage's reaches ncclReduceScatter / ncclAllGather (the CUDA runtime's
collectives, not only MPI); `hetc compile --backend=cuda --zero 2` plans
ZeRO (it was forced to 0 before the CUDA runtime had it); without a GPU the
job fails at once naming the missing device.

e2e (needs a GPU, exit 77 without): both builds train 12 steps with a
checkpoint at step 6; the CUDA losses equal the host backend's to 1e-4
relative per step (fp32 storage on both; the device sums in other orders);
the CUDA run resumed from its step-6 checkpoint (ZeRO state gathered from
and sliced back into device memory) gives steps 7..12 to the same
tolerance.  HETRT_VERBOSE's group lines say NCCL with two or more GPUs (the
TP pair and the ZeRO pair then sit on distinct GPUs) and CPU-mediated with
one, checked against `nvidia-smi -L`.
"""
import json
import os
import re
import shutil
import subprocess
import sys

from cudatest import (CLUSTER, DATA, MODEL, OPT, check, finish, fresh, gpu_count, losses,
                      run)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "stages"))
from stagetest import head_dp2  # noqa: E402

MODE, HETC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
STEPS = 12
RECORDS = ("tp", "tpshard", "zero", "zslice")


def compile_to(out, *extra):
    return run([HETC, MODEL, CLUSTER, "--seq", "64", "--microbatch", "4", "--global-batch", "16",
                "--threads", "2", "--steps", str(STEPS), *OPT, *extra, "-o", out])


def records(binary):
    """The stage config records of RECORDS' kinds, from the binary's strings."""
    data = open(binary, "rb").read()
    pat = rb"(?m)^(?:" + b"|".join(k.encode() for k in RECORDS) + rb") [^\n\x00]*"
    return [m.decode() for m in re.findall(pat, data)]


def symbols(binary):
    """name -> nm type letter (U undefined, T defined) of a binary."""
    p = subprocess.run(["nm", binary], capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 2:
            out[f[-1]] = f[-2]
    return out


def worst_rel(got, ref):
    if not got:
        return 1.0
    w = 0.0
    for k, v in got.items():
        r = ref.get(k, float("nan"))
        rel = abs(v - r) / max(abs(r), 1e-30)
        w = max(w, rel if rel == rel else 1.0)
    return w


fresh(WORK)
base = os.path.join(WORK, "base")
p = compile_to(base, "--backend=cuda")
if not check(p and p.returncode == 0, "hetc compile --backend=cuda (planner's plan) failed"):
    finish()
plan = json.load(open(os.path.join(base, "plan.json")))
st = plan["stages"]
big = head_dp2(st)
dp2 = [s for s in range(len(st)) if st[s]["dp"] == 2 and s != big]
if not check(len(st) >= 3 and dp2, f"expected 3 stages with a DP = 2 stage: {st}"):
    finish()
zs = dp2[0]
st[big]["tp"] = 2
st[zs]["zero"] = 2
edited = os.path.join(WORK, "plan.json")
json.dump(plan, open(edited, "w"))
cu, host = os.path.join(WORK, "cuda"), os.path.join(WORK, "host")
pc = compile_to(cu, "--backend=cuda", "--plan", edited)
ph = compile_to(host, "--plan", edited)
if not check(pc and pc.returncode == 0 and ph and ph.returncode == 0,
             "hetc compile --plan (TP 2 + ZeRO-2) failed for the cuda or host backend"):
    finish()

if MODE == "link":
    for s in range(len(st)):
        rc, rh = records(os.path.join(cu, f"stage_{s}")), records(os.path.join(host, f"stage_{s}"))
        check(rc == rh, f"stage {s}: cuda config records differ from the host backend's:\n"
              f"{rc}\n{rh}")
        kinds = {r.split()[0] for r in rc}
        if s == big:
            check(any(r.split()[0] == "tp" and r.split()[1 + s] == "2" for r in rc),
                  f"stage {s}: no `tp` record giving it TP 2: {rc}")
            check("tpshard" in kinds, f"stage {s}: no tpshard records")
        if s == zs:
            check("zero 2" in rc, f"stage {s}: no `zero 2` record: {rc}")
            check("zslice" in kinds, f"stage {s}: no zslice records")
    sym_tp = symbols(os.path.join(cu, f"stage_{big}"))
    sym_z = symbols(os.path.join(cu, f"stage_{zs}"))
    check(sym_tp.get("hetrt_tp_allreduce") == "T",
          "the TP stage does not define hetrt_tp_allreduce")
    for name in ("ncclAllReduce", "ncclReduceScatter", "ncclAllGather"):
        check(name in sym_tp and name in sym_z, f"the CUDA stage binaries do not reach {name}")
    check("ncclReduceScatter" not in symbols(os.path.join(host, f"stage_{zs}")),
          "the host backend's binary links NCCL")
    # the planner may give ZeRO to --backend=cuda now
    p = compile_to(os.path.join(WORK, "z2"), "--backend=cuda", "--zero", "2")
    if check(p and p.returncode == 0, "hetc compile --backend=cuda --zero 2 failed"):
        zplan = json.load(open(os.path.join(WORK, "z2", "plan.json")))
        zl = [s.get("zero", 0) for s in zplan["stages"] if s["dp"] > 1]
        check(zl and all(z == 2 for z in zl), f"--backend=cuda --zero 2: DP stages' zero {zl}")
    # without a GPU the TP/ZeRO job ends at once naming the device (no hang)
    probe = run([os.path.join(cu, f"stage_{big}"), "--data", DATA, "--steps", "0"], timeout=120)
    if probe and "no CUDA device" in probe.stderr:
        p = run([os.path.join(cu, "launch.sh"), "--data", DATA, "--steps", "1"], timeout=300)
        check(p and p.returncode != 0 and "no CUDA device" in p.stderr,
              "launch.sh of the TP/ZeRO cuda build did not fail naming the missing device")
    print(f"cuda TP 2 (stage {big}) + ZeRO-2 (stage {zs}): binaries link, records == host's",
          flush=True)
    finish()

# ---- e2e: needs a GPU
probe = run([os.path.join(cu, "stage_0"), "--data", DATA, "--steps", "0"], timeout=120)
if probe is None or "no CUDA device" in probe.stderr:
    print("SKIP: no CUDA device: the CUDA stage binaries train only on a machine with a GPU",
          flush=True)
    sys.exit(77)
ref = run([os.path.join(host, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
           "--checkpoint-dir", os.path.join(host, "ckpt")])
check(ref and ref.returncode == 0, "host backend: launch.sh failed")
ref_l = losses(ref.stdout if ref else "")
check(len(ref_l) == STEPS, f"host backend: {len(ref_l)} loss lines of {STEPS}")
ck = os.path.join(cu, "ckpt")
env = dict(os.environ, HETRT_VERBOSE="1")
p = run([os.path.join(cu, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
         "--checkpoint-dir", ck, "--checkpoint-every", "6"], env=env)
check(p and p.returncode == 0, "cuda backend (TP 2 + ZeRO-2): launch.sh failed")
got = losses(p.stdout if p else "")
check(sorted(got) == list(range(1, STEPS + 1)), f"cuda steps printed: {sorted(got)}")
w = worst_rel(got, ref_l)
check(w <= 1e-4, f"cuda TP 2 + ZeRO-2 vs host backend: max relative difference {w:.3g} > 1e-4")
n = gpu_count()
err = p.stderr if p else ""
for group in ("TP", "DP"):
    lines = re.findall(rf"\[hetrt\] stage \d+, dp rank \d+, tp rank \d+: {group} group of 2 "
                       rf"ranks: ([^\n]*)", err)
    check(len(lines) == 2, f"{group} group: {len(lines)} HETRT_VERBOSE lines, want 2")
    if n is not None and lines:
        want = "NCCL" if n >= 2 else "CPU-mediated"
        check(all(l.startswith(want) for l in lines), f"{n} GPU(s), {group} group: {lines}")
print(f"cuda TP 2 + ZeRO-2: {len(got)} steps == host backend to {w:.2g} ({n} GPU(s))", flush=True)
shutil.rmtree(os.path.join(ck, f"step_{STEPS:08d}"), ignore_errors=True)
p = run([os.path.join(cu, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
         "--checkpoint-dir", ck, "--resume"])
check(p and p.returncode == 0, "cuda backend: resume from step 6 failed")
more = losses(p.stdout if p else "")
check(sorted(more) == list(range(7, STEPS + 1)), f"steps after resume: {sorted(more)}")
w2 = worst_rel(more, ref_l)
check(w2 <= 1e-4, f"cuda resumed from its step-6 checkpoint vs host: {w2:.3g} > 1e-4")
print(f"resumed from the step-6 checkpoint: steps 7..{STEPS} == host backend to {w2:.2g}")
finish()
