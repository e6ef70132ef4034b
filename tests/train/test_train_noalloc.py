"""No allocation in hetc train's step loop after step 1 (issue 15, static
memory).  Each case trains examples/gpt_tiny.onnx for 2 and for 5 steps
with alloc_count.so preloaded (it counts every malloc / calloc / realloc
of the process); the difference of the two runs is what steps 3..5
allocated, process-wide.  Checks:

  - the executor's own allocations (--exec-stats) after step 1 are 0;
  - process-wide, steps 3..5 allocate nothing: the executor's arena is
    planned once and the kernels' scratch is per-thread workspace that is
    allocated on first use and reused (kernels/host/hk_ws.h); OpenBLAS
    runs single-threaded under the kernel pool (hk_sgemm.h), with the
    environment as it is;
  - both runs print the same losses for their common steps.

    test_train_noalloc.py HETC SOURCE_DIR ALLOC_COUNT_SO
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

HETC, SRC, SO = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = os.path.join(SRC, "examples/gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples/tiny_corpus.bin")
tmp = tempfile.mkdtemp(prefix="hetc_noalloc_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends
CASES = {
    "adamw": [],
    "adamw-accum2": ["--accum", "2", "--microbatch", "2"],
    "sgd": ["--optimizer", "sgd"],
}
STATS = re.compile(r"exec: train arena (\d+) B \(outputs (\d+) B\)")
ALLOCS = re.compile(r"exec: allocations: (\d+) in step 1, (\d+) in steps 2\.\.(\d+)")
LOSS = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+)", re.M)


def counts(path, exe):
    """(calls, bytes, big calls) of the one process named exe in the
    counter's file (one line per process), and the file is removed."""
    with open(path) as f:
        rows = [l.split() for l in f if l.strip()]
    os.remove(path)
    mine = [r for r in rows if r[0] == exe]
    if len(mine) != 1:
        sys.exit(f"FAIL: expected one '{exe}' line in the allocation counts, got {rows}")
    return tuple(int(x) for x in mine[0][1:4])


def train(steps, extra):
    out = os.path.join(tmp, "count")
    env = dict(os.environ, LD_PRELOAD=SO, HETC_ALLOC_COUNT_OUT=out)
    r = subprocess.run([HETC, "train", MODEL, "--precision", "fp32", "--data", DATA, "--steps", str(steps),
                        "--no-checkpoint", "--exec-stats", *extra],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        print(r.stdout, r.stderr)
        sys.exit(f"hetc train failed ({' '.join(extra)})")
    calls, nbytes, big = counts(out, os.path.basename(HETC))
    return r.stdout, calls, nbytes, big


fails = []
for name, extra in CASES.items():
    o2, c2, b2, g2 = train(2, extra)
    o5, c5, b5, g5 = train(5, extra)
    st, al = STATS.search(o5), ALLOCS.search(o5)
    if not st or not al:
        fails.append(f"{name}: no --exec-stats lines in:\n{o5}")
        continue
    outputs = int(st.group(2))
    ex_later = int(al.group(2))
    dc, db, dg = c5 - c2, b5 - b2, g5 - g2
    print(f"{name}: executor: {al.group(1)} allocation(s) in step 1, {ex_later} later; "
          f"process, steps 3..5: {dc} calls, {db} B, {dg} of >= 64 KiB "
          f"(node outputs {outputs} B per step)")
    if ex_later:
        fails.append(f"{name}: the executor allocated {ex_later} time(s) after step 1")
    if dc:
        fails.append(f"{name}: steps 3..5 made {dc} allocation(s) ({db} B) after step 1")
    l2, l5 = dict(LOSS.findall(o2)), dict(LOSS.findall(o5))
    if not l2 or any(l5.get(k) != v for k, v in l2.items()):
        fails.append(f"{name}: losses of the 2-step run {l2} differ from the 5-step run's {l5}")
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
