"""--backend=cuda stage programs run on the CPU (issue 15 item 5, without a GPU).

hetc compile --backend=cuda lowers every node of these models to direct calls
of the CUDA runtime's hetrt_cu_* entries (codegen/lower_node_cuda.c).  Here
the program's LLVM IR (--emit-llvm) is compiled by llc and linked with the
HOST stage runtime and tests/cuda/cu_twin.c, host twins of those entries
(the host kernels, the same arguments).  Trained on the CPU, its losses must
equal `hetc train`'s in the same precision: that checks the CUDA lowering's
calls -- shapes, strides, batch extents, offsets, constant flags, argument
order -- for every entry the models use.  The device kernels behind the
entries are checked against the same host kernels on a GPU (cuda_kernels,
bench/gpu); --fuse's PTX launches cannot run here.

usage: test_cuda_host_twin.py HETC SOURCE_DIR WORKDIR LLC CC LINK_ARG...
"""
import os
import re
import subprocess
import sys

import cudatest
from cudatest import check, finish, fresh, losses

HETC, SRC, WORK, LLC, CC = sys.argv[1:6]
LINK = sys.argv[6:]
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(WORK, "one_gpu.yaml")


def run(cmd, env=None):
    return cudatest.run(cmd, 600, env=env, pin=None)


def case(name, model, precision, seq, mb, accum, steps, opts, interpreted=0):
    """compile `model` for one GPU, link the program with the host twins,
    train it here and compare with hetc train; returns the worst relative
    difference of a step's loss and the entries called.  interpreted: the
    nodes the CUDA lowering leaves to hetrt_node (the host interpreter runs
    them here)"""
    d = os.path.join(WORK, name)
    p = run([HETC, model, CLUSTER, "--backend=cuda", "--precision", precision, "--seq", str(seq),
             "--microbatch", str(mb), "--global-batch", str(mb * accum), "--steps", str(steps),
             "--emit-llvm", *opts, "-o", d])
    if not check(p and p.returncode == 0, f"{name}: hetc compile --backend=cuda failed"):
        return None
    txt = open(os.path.join(d, "stages.txt")).read()
    m = re.search(r"^stage 0: (\d+) nodes as direct kernel calls, (\d+) interpreted", txt, re.M)
    check(m and int(m.group(2)) == interpreted,
          f"{name}: nodes left to hetrt_node, want {interpreted}:\n{txt[-600:]}")
    ll = open(os.path.join(d, "stage_0.ll")).read()
    entries = sorted(set(re.findall(r"call i32 @(hetrt_cu_\w+|hetrt_round_bf16_sr)\(", ll)))
    obj, exe = os.path.join(d, "stage_0.twin.o"), os.path.join(d, "stage_0_twin")
    p = run([LLC, "-O1", "-filetype=obj", "-relocation-model=pic", os.path.join(d, "stage_0.ll"),
             "-o", obj])
    if not check(p and p.returncode == 0, f"{name}: llc of stage_0.ll failed"):
        return None
    p = run([CC, obj, *LINK, "-o", exe])
    if not check(p and p.returncode == 0, f"{name}: linking with the host twins failed"):
        return None
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = run([exe, "--data", DATA, "--steps", str(steps), "--checkpoint-dir",
             os.path.join(d, "ckpt"), "--no-trace"], env=env)
    if not check(p and p.returncode == 0, f"{name}: the twin-linked program failed"):
        return None
    got = losses(p.stdout)
    p = run([HETC, "train", model, "--precision", precision, "--data", DATA, "--steps",
             str(steps), "--microbatch", str(mb), "--accum", str(accum), "--seq", str(seq),
             "--no-checkpoint", *opts], env=env)
    if not check(p and p.returncode == 0, f"{name}: hetc train failed"):
        return None
    ref = losses(p.stdout)
    if not check(len(got) == steps and len(ref) == steps,
                 f"{name}: {len(got)} / {len(ref)} loss lines of {steps}"):
        return None
    worst = max(abs(got[k] - ref[k]) / abs(ref[k]) for k in ref)
    print(f"{name}: {len(entries)} hetrt_cu_* entries ({', '.join(e.replace('hetrt_cu_', '') for e in entries)}); "
          f"{steps} steps, loss {got[1]:.6f} -> {got[steps]:.6f}, worst rel {worst:.2e} "
          "vs hetc train", flush=True)
    return worst, entries


fresh(WORK)
open(CLUSTER, "w").write("name: one-gpu\ndtype: fp32\nmeshes:\n  - name: gpu\n"
                         "    device: A100-80GB\n    nodes: 1\n    devices_per_node: 1\n")
tiny = os.path.join(SRC, "examples", "gpt_tiny.onnx")
opt = ["--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine"]
models = os.path.join(SRC, "tests", "models")
# gpt2_primitive: the GPT-2 test model without canonicalize (the exporter's
# MatMul / Softmax / Transpose / Where ops; Where and Gather have no CUDA
# lowering and run on the interpreter)
prim = ["--passes", "shape-infer,const-fold,shape-infer,dce"]
used = set()
for name, model, prec, seq, mb, acc, tol, extra, interp in (
        ("gpt_tiny_fp32", tiny, "fp32", 64, 4, 4, 1e-5, [], 0),
        ("gpt_tiny_bf16", tiny, "bf16-mixed", 64, 4, 2, 1e-5, [], 0),
        # the weight copies rounded stochastically: a runtime entry of every
        # backend (the step it draws with is the runtime's)
        ("gpt_tiny_bf16_sr", tiny, "bf16-mixed", 64, 4, 2, 1e-5,
         ["--bf16-rounding", "stochastic"], 0),
        ("llama_fp32", os.path.join(models, "llama_op17.onnx"), "fp32", 16, 2, 2, 1e-5, [], 0),
        ("gpt2_primitive", os.path.join(models, "gpt2_op17.onnx"), "fp32", 16, 2, 2, 1e-5, prim,
         6)):
    r = case(name, model, prec, seq, mb, acc, 8, opt + extra, interp)
    if r:
        used |= set(r[1])
        check(r[0] <= tol, f"{name}: worst relative loss difference {r[0]:.2e} > {tol:g}")
# the entries the programs call between them: every direct entry but
# the PTX launch (--fuse) must have run here
want = {"hetrt_cu_" + e for e in (
    "binary", "unary", "unary_grad", "linear", "linear_grad", "cast", "linear_bf16",
    "linear_grad_bf16", "adamw", "norm", "norm_grad", "matmul", "strided_copy", "reduce_sum",
    "attention", "attention_grad", "embedding", "embedding_grad", "cross_entropy",
    "cross_entropy_grad")} | {"hetrt_round_bf16_sr"}
check(want <= used, f"entries no case called: {sorted(want - used)}")
finish()
