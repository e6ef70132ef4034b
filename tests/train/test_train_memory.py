"""hetc train's memory (issue 15: peak RSS <= llm.c's CPU trainer).

Checks 1-3 are of the executor engine (`--engine executor`), whose memory
plan --exec-stats prints; the default, compiled engine runs the stage
binary, whose arena is checked by tests/stages (stages_memory) and whose
allocations by train_stage_noalloc.  Check 1 also covers the compiled
engine: neither hetc train nor the program that trains (stage_0) loads
LLVM or CUDA (the `hetc compile` child does, writing its loader's lines
into its own log).

Two checks, neither a guess about the machine:

1. Libraries.  `hetc train` loads neither libLLVM nor any CUDA library
   (cuBLASLt, cudart, NCCL, the driver) nor the modules hetc opens for code
   emission and device profiling (codegen/lazy_module.h): glibc's loader
   lists every object it maps (LD_DEBUG=files), whether a DT_NEEDED entry
   of any object pulled it in or dlopen did.  Linked into hetc, cuBLASLt
   and LLVM made the process ~205 MB resident before main (gpt_tiny trained
   in 271 MB).  So that this check can fail, `hetc compile` of the same
   model must show hetc_llvm being loaded in the same listing.

2. A bound derived from the model.  What the run adds to the process
   beyond hetc's own start-up (the peak RSS of `hetc train --help`: the
   same executable and libraries, no model) must fit in

       S * param_bytes + train arena + update arena
           + model file + data file + hetc's code

   S = 1 (the trainer's weights) + the optimizer's state buffers (AdamW
   m and v: 2; SGD momentum: 1) + 1 with --accum > 1 (the gradient
   accumulators; with one microbatch the update reads the gradients in the
   train arena); the arenas are the executor's memory plan as
   --exec-stats prints it; the model file's size covers the imported
   graph, the data file's the token loader, the size of hetc's loadable
   code the pages of it that training runs and --help does not (with the
   rest: OpenBLAS's packing buffers, thread stacks, libm's pages; 1.7 MB
   of the bound is left over on gpt_tiny at 4 x 64 before this term).  One buffer per node output
   instead of the planned arena (40 MB instead of 11 MB here), a kept copy
   of the weights, or compile-time structures left alive would not fit.
   The kernel pool is set to 2 threads (HETC_THREADS, hetc's own; each
   thread's stack and scratch are otherwise per CPU); OpenBLAS's
   environment is left as it is: its threads and buffer reservations are
   made at load time, so they are in the start-up figure too.

Peak RSS is each process's ru_maxrss through GNU time, as bench/train_host
measures it.

    test_train_memory.py HETC SOURCE_DIR [--libraries-only]

(--libraries-only: check 1 alone, for the sanitizer build, whose shadow
memory and allocator make check 2's resident sizes meaningless.)
"""
import atexit
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HETC, SRC = sys.argv[1], sys.argv[2]
LIBS_ONLY = "--libraries-only" in sys.argv[3:]
MODEL = os.path.join(SRC, "examples/gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples/tiny_corpus.bin")
tmp = tempfile.mkdtemp(prefix="hetc_memory_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends
ENV = dict(os.environ, HETC_THREADS="2")
HEAVY = re.compile(r"LLVM|cublas|cudart|libcuda\.|nccl|hetc_llvm|hetc_cudaprof")
LOADED = re.compile(r"^\s*\d+:\s+file=(\S+)", re.M)
PARAMS = re.compile(r"hetc train: .*?, (\d+) parameters \((\d+) elements\)")
STATS = re.compile(r"exec: train arena (\d+) B \(outputs (\d+) B\).*?\| update arena (\d+) B")
fails = []


def run(cmd, env=ENV):
    """(returncode, stdout, stderr) of one process."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def run_rss(cmd, env=ENV):
    """(returncode, stdout, stderr, peak RSS bytes) under GNU time (scripts/deps),
    as bench/train_host measures: a child forked by this Python process would
    carry Python's own resident size into its ru_maxrss across exec."""
    path = os.path.join(tmp, "rss")
    rc, out, err = run(["/usr/bin/time", "-f", "%M", "-o", path] + cmd, env)
    with open(path) as f:
        kb = [int(l) for l in f.read().split() if l.isdigit()]
    return rc, out, err, kb[-1] * 1024


def text_bytes(path):
    """Bytes of the executable's loadable code (ELF64 PT_LOAD segments with
    PF_X): at most what running more of hetc's own code can fault in."""
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        sys.exit(f"FAIL: {path} is not an ELF64 executable")
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    total = 0
    for i in range(phnum):
        ptype, flags = struct.unpack_from("<II", elf, phoff + i * phentsize)
        memsz, = struct.unpack_from("<Q", elf, phoff + i * phentsize + 0x28)
        if ptype == 1 and flags & 1:
            total += memsz
    return total


def loaded(cmd):
    env = dict(ENV, LD_DEBUG="files")
    rc, out, err = run(cmd, env)
    return rc, out, err, LOADED.findall(err)


# ---------------------------------------------------------------- 1. libraries
# fp32 (hetc's default is bf16-mixed): the bound below counts fp32 parameters and arenas
FP32 = ["--precision", "fp32"]
train = [HETC, "train", MODEL, "--engine", "executor", "--data", DATA, "--steps", "2",
         "--no-checkpoint", *FP32]
rc, out, err, libs = loaded(train)
if rc:
    sys.exit(f"FAIL: hetc train failed:\n{out}\n{err[-3000:]}")
heavy = sorted({l for l in libs if HEAVY.search(l)})
print(f"hetc train loaded {len(libs)} objects; LLVM / CUDA among them: {heavy or 'none'}")
if heavy:
    fails.append(f"hetc train loaded {heavy}")
# the compiled engine: which process loaded what (LD_DEBUG prefixes every line
# with its pid; a process names its program in "initialize program: PATH")
env = dict(ENV, LD_DEBUG="files")
rc, out, err = run([HETC, "train", MODEL, "--engine", "compiled", "--data", DATA, "--steps", "2",
                    "--no-checkpoint", *FP32], env)
if rc:
    sys.exit(f"FAIL: hetc train --engine compiled failed:\n{out}\n{err[-3000:]}")
prog, bypid = {}, {}
for m in re.finditer(r"^\s*(\d+):\s+initialize program: (\S+)", err, re.M):
    prog.setdefault(m.group(1), os.path.basename(m.group(2)))
for m in re.finditer(r"^\s*(\d+):\s+file=(\S+)", err, re.M):
    bypid.setdefault(m.group(1), set()).add(m.group(2))
names = sorted(prog.values())
heavy_of = {prog.get(p, p): sorted(l for l in libs if HEAVY.search(l)) for p, libs in bypid.items()}
print(f"--engine compiled: processes {names}; LLVM / CUDA loaded by: "
      f"{ {k: v for k, v in heavy_of.items() if v} }")
# the compile child writes its loader's lines into its log (hetc train shows the
# log only when the compile fails); hetc compile's own listing is checked below
if sorted(names) != ["hetc", "stage_0"]:
    fails.append(f"--engine compiled: expected hetc train and stage_0 in LD_DEBUG's listing, "
                 f"got {names}")
for who, libs in heavy_of.items():
    if libs:
        fails.append(f"--engine compiled: {who} loaded {libs}")

# ------------------------------------------------------------------- 2. bound
if LIBS_ONLY:
    for f in fails:
        print("FAIL", f)
    sys.exit(1 if fails else 0)
rc, out, err, base = run_rss([HETC, "train", "--help"])
if rc:
    sys.exit(f"FAIL: hetc train --help failed ({rc})")
files = os.path.getsize(MODEL) + os.path.getsize(DATA) + text_bytes(HETC)
print(f"start-up (hetc train --help): {base / 1e6:.1f} MB; model + data files + hetc's code "
      f"{files / 1e6:.2f} MB")
CASES = {
    "adamw": ([], 2),
    "adamw-accum2": (["--accum", "2", "--microbatch", "2"], 3),
    "sgd": (["--optimizer", "sgd"], 1),
    "adamw-b8": (["--microbatch", "8"], 2),
}
for name, (extra, state) in CASES.items():
    rc, out, err, peak = run_rss(train[:8] + ["3", "--no-checkpoint", "--exec-stats", *FP32,
                                              *extra])
    if rc:
        fails.append(f"{name}: hetc train failed ({rc}):\n{err[-2000:]}")
        continue
    pm, st = PARAMS.search(out), STATS.search(out)
    if not pm or not st:
        fails.append(f"{name}: no parameter / --exec-stats lines in:\n{out}")
        continue
    pbytes = int(pm.group(2)) * 4
    tarena, outputs, uarena = (int(st.group(i)) for i in (1, 2, 3))
    s = 1 + state
    bound = s * pbytes + tarena + uarena + files
    added = peak - base
    print(f"{name}: peak {peak / 1e6:.1f} MB, added {added / 1e6:.2f} MB <= {s} x params "
          f"{pbytes / 1e6:.2f} + arenas {tarena / 1e6:.2f} + {uarena / 1e6:.2f} + files+code "
          f"= {bound / 1e6:.2f} MB (one buffer per node output: {outputs / 1e6:.1f} MB)")
    if added > bound:
        fails.append(f"{name}: hetc train added {added} B to its start-up RSS, more than "
                     f"the {bound} B its parameters, state, arenas and files account for")

# ------------------------------------------- 3. the peak RSS hetc reports
# metrics.jsonl's peak_rss_bytes is the process's own since its exec: with
# this Python holding a 256 MB ballast, a child it forks must not report the
# ballast (getrusage's ru_maxrss would: it survives execve; GNU time in
# between hides that, so the reporting run is forked directly).
ballast = bytearray(256 << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
mfile = os.path.join(tmp, "metrics.jsonl")
cmd = train[:8] + ["2", "--no-checkpoint", "--metrics", mfile, *FP32]
rc, out, err = run(cmd)  # forked by this Python itself, not through GNU time
del ballast
rep = []
if not rc:
    with open(mfile) as f:
        rep = [json.loads(l)["stages"][0]["peak_rss_bytes"] for l in f if '"stages"' in l]
    rc, out, err, peak = run_rss(cmd)  # the same run's peak, measured from outside
if rc or not rep:
    fails.append(f"metrics run: hetc train failed ({rc}) or wrote no stages:\n{err[-2000:]}")
else:
    print(f"reported peak RSS {rep[-1] / 1e6:.1f} MB; GNU time {peak / 1e6:.1f} MB "
          f"(this Python held a 268 MB ballast)")
    if abs(rep[-1] - peak) > 0.25 * peak + (4 << 20):
        fails.append(f"metrics.jsonl peak_rss_bytes {rep[-1]} is not the process's own peak "
                     f"{peak} B (GNU time)")
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
