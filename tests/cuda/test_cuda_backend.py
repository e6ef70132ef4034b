"""hetc compile --backend=cuda without a GPU (issue 7, part 5: CI).

The example GPT compiled for examples/clusters/tiny_hetero.yaml with
--backend=cuda: every stage binary links (cudart, cuBLASLt and NCCL among its
shared libraries; the default host backend links none of them).  Where no
GPU is present, a stage binary run on its own and the whole job under
launch.sh both fail at once with a "no CUDA device" message and a non-zero
status (the subprocess timeouts only guard against a hang).  Where a GPU is
present those two checks do not apply (tests/cuda/test_cuda_e2e.py runs it).

Precision (issue 17): without --precision, --backend=cuda compiles fp32
(its bf16 kernels have not yet run on a GPU) where the host backend
compiles bf16-mixed, hetc's default; with --plan FILE the plan's
"precision" rules (a bf16-mixed host plan compiles bf16-mixed for cuda,
with a note).  Every other compile here names its precision.

usage: test_cuda_backend.py HETC WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

import cudatest
from cudatest import CLUSTER, DATA, MODEL, check, finish, fresh

HETC, WORK = sys.argv[1], sys.argv[2]
def run(cmd, timeout=600, pin="fp32"):
    return cudatest.run(cmd, timeout, tail=2000, pin=pin)


def needed(path):
    """DT_NEEDED libraries of an ELF file (readelf -d)."""
    p = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
    return [l.split("[")[1].split("]")[0] for l in p.stdout.splitlines() if "(NEEDED)" in l]


def compile_to(out, *extra, pin="fp32"):
    """hetc compile into out; pin: --precision unless extra names one (None:
    the default)"""
    return run([HETC, MODEL, CLUSTER, "--seq", "64", "--microbatch", "4", "--global-batch", "16",
                "--threads", "2", "--steps", "3", *extra, "-o", out], pin=pin)


def planned_precision(out):
    import json
    return json.load(open(os.path.join(out, "plan.json"))).get("precision")


fresh(WORK)
cu, host = os.path.join(WORK, "cuda"), os.path.join(WORK, "host")
p = compile_to(cu, "--backend=cuda", pin=None)  # no --precision: cuda's default
if not check(p and p.returncode == 0, "hetc compile --backend=cuda failed"):
    sys.exit(1)
check("fp32 cuda backend" in p.stderr, "the memory report does not name the cuda backend")
check("compile: precision fp32 (--backend cuda's default)" in p.stderr and
      planned_precision(cu) == "fp32", "--backend=cuda without --precision does not compile "
      f"fp32: plan.json {planned_precision(cu)}, stderr:\n{p.stderr[-1500:]}")
nst = 0
while os.path.exists(os.path.join(cu, f"stage_{nst}")):
    libs = needed(os.path.join(cu, f"stage_{nst}"))
    for want in ("libcudart", "libcublasLt", "libnccl"):
        check(any(l.startswith(want) for l in libs), f"stage_{nst} does not link {want}: {libs}")
    nst += 1
check(nst >= 3, f"{nst} stage binaries, want >= 3 (tiny_hetero plans 3 stages)")

# issue 15 item 5: every node of the CUDA programs of gpt_tiny is a direct
# call of a hetrt_cu_* entry or a runtime copy (codegen/lower_node_cuda.c), so
# the binaries carry no node interpreter, no IR parser and no IR text;
# --interpret-nodes keeps every node interpreted
def kernel_counts(out):
    """stage -> (direct, interpreted) from stages.txt's kernel lines"""
    txt = open(os.path.join(out, "stages.txt")).read()
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in
            re.finditer(r"^stage (\d+): (\d+) nodes as direct kernel calls, (\d+) interpreted",
                        txt, re.M)}


def symbols(path):
    p = subprocess.run(["nm", path], capture_output=True, text=True)
    return p.stdout


cnt = kernel_counts(cu)
check(len(cnt) == nst, f"stages.txt has kernel lines for {len(cnt)} of {nst} stages")
# the IR's text form (ir/print.c): a graph header, declarations, nodes
IR_LINE = re.compile(r"^graph \S+ opset=\d+ \{$|^  (const|param|input) %\S+ : |%\S+ = [A-Z]\w*\(")


def ir_text_lines(path):
    p = subprocess.run(["strings", "-n", "8", path], capture_output=True, text=True)
    return [l for l in p.stdout.splitlines() if IR_LINE.search(l)]


for s, (d, i) in sorted(cnt.items()):
    check(d > 0 and i == 0, f"--backend=cuda stage {s}: {d} direct, {i} interpreted nodes "
          "(want every node direct)")
    binary = os.path.join(cu, f"stage_{s}")
    syms = symbols(binary)
    for name in ("hetrt_node", "hetrt_interp_open", "ir_parse", "ir_graph_free",
                 "hexec_call_node_into", "cudaexec_call_node"):
        check(not re.search(r" [TtU] %s$" % name, syms, re.M),
              f"stage_{s} of --backend=cuda carries {name}: the node interpreter or the IR parser")
    lines = ir_text_lines(binary)
    check(not lines, f"stage_{s} of --backend=cuda embeds IR text: {lines[:2]}")
# the transformer blocks' elementwise nodes (stage 1 holds them) call the
# hetrt_cu_* entries; a stage's direct nodes may also be runtime copies only
with_cu = [s for s in cnt if re.search(r" [TU] hetrt_cu_", symbols(os.path.join(cu, f"stage_{s}")))]
check(1 in with_cu, f"stages calling hetrt_cu_* entries: {with_cu}, want stage 1 among them")
print("cuda direct/interpreted nodes per stage:", cnt, "; hetrt_cu_* in stages", with_cu, flush=True)
# the LLaMA-style test model (RMSNorm, rotary's Slice / Neg / Concat and its
# constant cos / sin tables, GQA, SwiGLU) is all direct calls too
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cl = os.path.join(WORK, "llama")
p = run([HETC, os.path.join(SRC, "tests", "models", "llama_op17.onnx"), CLUSTER, "--seq", "16",
         "--microbatch", "2", "--global-batch", "4", "--steps", "2", "--backend=cuda", "-o", cl])
if check(p and p.returncode == 0, "hetc compile --backend=cuda of llama_op17 failed"):
    for s, (d, i) in sorted(kernel_counts(cl).items()):
        check(d > 0 and i == 0, f"llama_op17 --backend=cuda stage {s}: {d} direct, {i} "
              "interpreted (want every node direct)")
        check(not re.search(r" [TtU] hetrt_node$", symbols(os.path.join(cl, f"stage_{s}")), re.M),
              f"llama_op17 --backend=cuda stage_{s} carries hetrt_node")
# --fuse: the fused elementwise kernels (RoPE, SwiGLU and their backward on
# the LLaMA-style model) become generated PTX, one module per kernel in the
# binary, launched by hetrt_cu_launch; --emit-llvm's stage_K.ptx (all of a
# stage's kernels) assembles with ptxas for sm_80 and sm_90
cf = os.path.join(WORK, "llama_fused")
p = run([HETC, os.path.join(SRC, "tests", "models", "llama_op17.onnx"), CLUSTER, "--seq", "16",
         "--microbatch", "2", "--global-batch", "4", "--steps", "2", "--backend=cuda", "--fuse",
         "--emit-llvm", "-o", cf])
if check(p and p.returncode == 0, "hetc compile --backend=cuda --fuse of llama_op17 failed"):
    txt = open(os.path.join(cf, "stages.txt")).read()
    fused = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
        r"^stage (\d+): .*\n  fused: \d+ of them in (\d+) generated", txt, re.M)}
    check(sum(fused.values()) > 0, "llama_op17 --backend=cuda --fuse: no generated kernels:\n" + txt)
    ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas"
                                      if os.access("/usr/local/cuda/bin/ptxas", os.X_OK) else None)
    for s, k in sorted(fused.items()):
        ll = open(os.path.join(cf, f"stage_{s}.ll")).read()
        launches = len(re.findall(r"call i32 @hetrt_cu_launch\(", ll))
        check(launches == k, f"stage {s}: {launches} hetrt_cu_launch calls for {k} fused kernels")
        check(not re.search(r"^define .*@fused_", ll, re.M),
              f"stage {s}: a fused kernel was defined as host code in the CUDA program")
        strs = subprocess.run(["strings", "-n", "6", os.path.join(cf, f"stage_{s}")],
                              capture_output=True, text=True).stdout
        entries = len(re.findall(r"^\.visible \.entry ", strs, re.M))
        check(entries == k, f"stage_{s}: {entries} PTX kernel entries in the binary, want {k}")
        for arch in ("sm_80", "sm_90"):
            if not ptxas:
                print("ptxas not found: the PTX modules are not assembled", flush=True)
                break
            a = subprocess.run([ptxas, "-arch=" + arch, os.path.join(cf, f"stage_{s}.ptx"),
                                "-o", os.path.join(cf, f"stage_{s}.{arch}.cubin")],
                               capture_output=True, text=True)
            check(a.returncode == 0, f"ptxas -arch={arch} stage_{s}.ptx: {a.stderr[-800:]}")
    print("--backend=cuda --fuse: generated kernels per stage", fused, flush=True)
p = run([HETC, MODEL, CLUSTER, "--backend=cuda", "--fuse", "--no-fuse", "-o",
         os.path.join(WORK, "bad_fuse")])
check(p and p.returncode == 2 and "--fuse contradicts --no-fuse" in p.stderr,
      "--fuse with --no-fuse is not refused clearly")
ci = os.path.join(WORK, "cuda_interp")
p = compile_to(ci, "--backend=cuda", "--interpret-nodes")
if check(p and p.returncode == 0, "hetc compile --backend=cuda --interpret-nodes failed"):
    for s, (d, i) in sorted(kernel_counts(ci).items()):
        check(d == 0, f"--interpret-nodes stage {s}: {d} direct")
        check(not re.search(r" [TU] hetrt_cu_", symbols(os.path.join(ci, f"stage_{s}"))),
              f"--interpret-nodes stage_{s} calls a hetrt_cu_* entry")

# issue 17: --precision bf16-mixed on cuda: the stages with Linears call the
# bf16 entries (cuBLASLt bf16 GEMMs) directly, never the f32 Linear on bf16
# data; the bf16 gradient wire stays host-only and is refused
cb = os.path.join(WORK, "cuda_bf16")
p = compile_to(cb, "--backend=cuda", "--precision", "bf16-mixed", "--emit-llvm")
if check(p and p.returncode == 0, "hetc compile --backend=cuda --precision bf16-mixed failed"):
    # the calls the programs make (stage_K.ll: the runtime is linked whole,
    # so the binaries' symbols do not tell)
    calls = {s: set(re.findall(r"call i32 @(hetrt_cu_(?:linear\w*|cast))\(",
                               open(os.path.join(cb, f"stage_{s}.ll")).read()))
             for s in kernel_counts(cb)}
    bf = [s for s, c in calls.items() if {"hetrt_cu_linear_bf16", "hetrt_cu_linear_grad_bf16",
                                           "hetrt_cu_cast"} <= c]
    f32 = [s for s, c in calls.items() if c & {"hetrt_cu_linear", "hetrt_cu_linear_grad"}]
    check(len(bf) >= 2 and not f32,
          f"bf16-mixed cuda: stages calling the bf16 Linear and Cast entries {bf}, the f32 "
          f"Linear ones {f32} (want the blocks and the head on bf16, none on f32): {calls}")
    txt = open(os.path.join(cb, "stages.txt")).read()
    check(not re.search(r"interpreted \(hetrt_node\):.*\b(Cast|Linear|LinearGrad) x", txt),
          "bf16-mixed cuda: a Cast, Linear or LinearGrad is interpreted:\n" + txt[-800:])
    print("bf16-mixed cuda: stages with bf16 Linear entries", bf, flush=True)
p = compile_to(os.path.join(WORK, "cuda_bf16_wire"), "--backend=cuda", "--precision",
               "bf16-mixed", "--grad-reduce-dtype", "bf16")
check(p and p.returncode == 2 and "--grad-reduce-dtype bf16 runs on the host backend only"
      in p.stderr, "--grad-reduce-dtype bf16 with --backend=cuda is not refused clearly")

p = compile_to(host, pin=None)  # no --precision, host backend: bf16-mixed
check(p and p.returncode == 0, "hetc compile (default backend) failed")
check(p and "compile: precision bf16-mixed (the default)" in p.stderr and
      planned_precision(host) == "bf16-mixed" and "bf16-mixed" in
      open(os.path.join(host, "stages.txt")).read(), "the host backend without --precision "
      f"does not compile bf16-mixed: plan.json {planned_precision(host)}")
# that bf16-mixed plan compiled for cuda without --precision: the plan's precision rules
p = compile_to(os.path.join(WORK, "cuda_from_host_plan"), "--backend=cuda", "--plan",
               os.path.join(host, "plan.json"), pin=None)
check(p and p.returncode == 0 and
      "compile: precision bf16-mixed (the plan's \"precision\")" in p.stderr and
      "have not yet run on a GPU" in p.stderr, "--backend=cuda --plan of a bf16-mixed plan: "
      f"not bf16-mixed with a note: {p and p.stderr[-1500:]}")
libs = needed(os.path.join(host, "stage_0"))
check(not any("cuda" in l or "nccl" in l or "cublas" in l for l in libs),
      f"the default (host) backend links CUDA libraries: {libs}")

p = compile_to(os.path.join(WORK, "bad"), "--backend=tpu")
check(p and p.returncode != 0 and "--backend must be host or cuda" in p.stderr,
      "--backend=tpu is not refused with a clear message")

# without a GPU: a clear error, non-zero, no hang
p = run([os.path.join(cu, "stage_0"), "--data", DATA, "--steps", "1"], timeout=120)
gpu = p is not None and "no CUDA device" not in p.stderr
if gpu:
    print("a CUDA device is present: the no-device checks do not apply here", flush=True)
    p = run([os.path.join(cu, "stage_0"), "--help"])
    check(p and p.returncode == 0, "stage_0 --help failed")
else:
    check(p is not None and p.returncode != 0, "stage_0 without a device exited 0")
    check(p is not None and "--backend=host" in p.stderr, "the error does not say how to fix it")
    p = run([os.path.join(cu, "launch.sh"), "--data", DATA, "--steps", "1"], timeout=240)
    check(p is not None and p.returncode != 0, "launch.sh without a device exited 0")
    check(p is not None and "no CUDA device" in (p.stdout + p.stderr),
          "launch.sh output does not name the missing device")

finish("ok: --backend=cuda links", nst, "stage binaries;",
      "GPU present" if gpu else "without a GPU they fail at once with 'no CUDA device'")
