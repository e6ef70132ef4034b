"""The example GPT trains on one GPU with the CUDA backend (issue 7, "done when").

Compiled with --backend=cuda for a one-device cluster (one stage) and for
examples/clusters/tiny_pair.yaml (two stages over a `device-direct` link:
with two or more GPUs the ranks take one each and the link runs NCCL
point-to-point; with one GPU both ranks share it and the link falls back to
the CPU-mediated path -- HETRT_VERBOSE's line says which, and the test checks
it against the GPU count), then run with launch.sh.  Oracle: `hetc
train` on the host, same data order and microbatching.  The device keeps
fp32 storage and accumulates in fp32 with other summation orders (cuBLASLt,
atomics in EmbeddingGrad), so losses agree to 1e-3 relative per step, and
the mean relative error is far inside H2's 1.5 % alignment criterion.
The one-stage model again with --precision bf16-mixed (issue 17: bf16
Casts and cuBLASLt bf16 tensor-core Linears) against `hetc train
--precision bf16-mixed` on the host: a bf16 rounding flipped by another
summation order moves a value by 2^-8, so per step within 1e-2, and the
mean within the issue's 1.5 %.

Needs a GPU: without one it prints why and exits 77 (ctest SKIP).

usage: test_cuda_e2e.py HETC WORKDIR
"""
import json
import os
import sys

from cudatest import DATA, MODEL, OPT, SRC, check, finish, fresh, gpu_count, losses, run

HETC, WORK = sys.argv[1], sys.argv[2]
SEQ, MB, GB, STEPS = 64, 4, 16, 12
ONE_GPU = """name: one-gpu
dtype: fp16
meshes:
  - name: gpu
    device: A100-80GB
    nodes: 1
    devices_per_node: 1
"""
fresh(WORK)
one = os.path.join(WORK, "one_gpu.yaml")
open(one, "w").write(ONE_GPU)
pair = os.path.join(SRC, "examples", "clusters", "tiny_pair.yaml")

FP32 = ["--precision", "fp32"]  # what fp32 CUDA has run; the host oracle's too
for name, cluster, prec in (("one stage", one, FP32), ("two stages, direct link", pair, FP32),
                            ("bf16 one stage", one, ["--precision", "bf16-mixed"])):
    out = os.path.join(WORK, name.replace(" ", "_"))
    p = run([HETC, MODEL, cluster, "--backend=cuda", "--seq", str(SEQ), "--microbatch", str(MB),
             "--global-batch", str(GB), "--threads", "2", "--steps", str(STEPS), *OPT, *prec,
             "-o", out])
    if not check(p.returncode == 0, f"{name}: hetc compile --backend=cuda failed"):
        continue
    probe = run([os.path.join(out, "stage_0"), "--data", DATA, "--steps", "0"], timeout=120)
    if "no CUDA device" in probe.stderr:
        print("SKIP: no CUDA device: the CUDA stage binaries train only on a machine with a GPU",
              flush=True)
        sys.exit(77)
    plan = json.load(open(os.path.join(out, "plan.json")))
    K = plan["microbatches"]
    check(len(plan["stages"]) == (1 if cluster == one else 2),
          f"{name}: the plan has {len(plan['stages'])} stages")
    ref = run([HETC, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch",
               str(MB), "--accum", str(K), "--seq", str(SEQ), *OPT, *prec, "--no-checkpoint"])
    check(ref.returncode == 0, "hetc train failed")
    ref_l = losses(ref.stdout)
    p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
             "--checkpoint-dir", os.path.join(out, "ckpt")],
            env=dict(os.environ, HETRT_VERBOSE="1"))
    check(p.returncode == 0, f"{name}: launch.sh exit {p.returncode}")
    if cluster == pair:
        n = gpu_count()
        nccl = "link to stage 1: NCCL point-to-point" in p.stderr
        shared = "CPU-mediated here" in p.stderr
        if n is not None:
            check(nccl if n >= 2 else shared, f"{name}: {n} GPU(s) but the link reports "
                  f"{'NCCL' if nccl else 'CPU-mediated' if shared else 'nothing'}")
        print(f"{name}: {n} GPU(s), link {'NCCL' if nccl else 'CPU-mediated'}", flush=True)
    got = losses(p.stdout)
    check(len(got) == STEPS, f"{name}: {len(got)} loss lines of {STEPS}")
    rels = [abs(got[k] - ref_l[k]) / max(abs(ref_l[k]), 1e-30) for k in got if k in ref_l]
    worst = max(rels, default=1.0)
    mean = sum(rels) / max(len(rels), 1)
    check(worst <= (1e-2 if prec else 1e-3),
          f"{name}: loss vs host hetc train: max relative difference {worst:.3g}")
    check(mean < 0.015, f"{name}: mean relative error {mean:.3g} >= 1.5 % (H2's criterion)")
    check(got.get(STEPS, 99) < got.get(1, 0), f"{name}: loss is not falling")
    print(f"{name}: {len(got)} steps on the GPU, loss vs host: max rel {worst:.3g}, mean rel "
          f"{mean:.3g}", flush=True)

finish()
