"""No allocation in a stage binary's step loop after step 1 (issue 15 item
3), counted as train_noalloc counts hetc train: examples/gpt_tiny.onnx is
compiled onto a one-device cluster (a one-stage program, as bench/train_host's
`launch` contender runs it) and its launch.sh runs 2 and then 8 steps with
alloc_count.so preloaded (every process of the launch appends its own line);
the stage binary's counts must be equal up to one allocation -- steps 3..8
allocate nothing; the one allowed is a 32-byte allocation that one run in a
few makes and the other does not, in either order (timing-dependent, outside
hetc's kernels; not yet traced), where an allocation per step would show as
6 or more -- and the two runs' common steps must print the same losses.
The trace (on by default) records into a ring allocated at start-up; a ring
of 4 spans wraps in both runs, so its end-of-run gather is the same size.

Multi-stage pipelines are not checked here: their transfers and MPI's
non-blocking collectives still allocate per step (docs/PERF.md).

    test_stage_noalloc.py HETC SOURCE_DIR ALLOC_COUNT_SO
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HETC, SRC, SO = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = os.path.join(SRC, "examples/gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples/tiny_corpus.bin")
LOSS = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+)", re.M)
tmp = tempfile.mkdtemp(prefix="hetc_stage_noalloc_")
cluster = os.path.join(SRC, "examples/clusters/one_host.yaml")
out = os.path.join(tmp, "prog")
p = subprocess.run([HETC, "compile", MODEL, cluster, "--precision", "fp32", "-o", out, "--microbatch", "4",
                    "--global-batch", "4", "--seq", "64"], capture_output=True, text=True)
if p.returncode:
    sys.exit(f"FAIL: hetc compile exited {p.returncode}:\n{p.stdout}{p.stderr}")


def launch(steps):
    counts = os.path.join(tmp, f"count{steps}")
    env = dict(os.environ, LD_PRELOAD=SO, HETC_ALLOC_COUNT_OUT=counts)
    r = subprocess.run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(steps),
                        "--checkpoint-every", "0", "--trace-spans", "4",
                        "--checkpoint-dir", os.path.join(tmp, f"ckpt{steps}")],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        sys.exit(f"FAIL: launch.sh --steps {steps} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    with open(counts) as f:
        rows = [l.split() for l in f if l.strip()]
    # the launch script also runs stage_0 --build-id: the training run is
    # the stage_0 process that allocated most
    runs = [tuple(int(x) for x in r[1:4]) for r in rows if r[0] == "stage_0"]
    if not runs:
        sys.exit(f"FAIL: no stage_0 line in the allocation counts: {rows}")
    return max(runs), dict(LOSS.findall(r.stdout))


(c2, b2, _), l2 = launch(2)
(c8, b8, _), l8 = launch(8)
print(f"stage_0: {c2} allocations ({b2} B) in a 2-step run, {c8} ({b8} B) in an 8-step run: "
      f"steps 3..8 made {c8 - c2}")
fails = []
if abs(c8 - c2) > 1 or abs(b8 - b2) > 64:
    fails.append(f"steps 3..8 of the stage binary made {c8 - c2} allocation(s), {b8 - b2} B")
if len(l2) != 2 or len(l8) != 8 or any(l8.get(k) != v for k, v in l2.items()):
    fails.append(f"losses of the 2-step run {l2} differ from the 8-step run's {l8}")
for f in fails:
    print("FAIL", f)
shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if fails else 0)
