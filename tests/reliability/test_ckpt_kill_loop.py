"""Kill-during-checkpoint loop (issue 16, "done when" of item 6): 20 runs
checkpointing every step, each SIGKILLed at a seeded random rank and time
(some inside a checkpoint write), then resumed to the end: every resume
must reproduce the uninterrupted run's losses bit for bit from the step it
resumes at, or refuse naming a file -- never train on a mixture.

usage: test_ckpt_kill_loop.py HETC SOURCE_DIR
"""
import os
import random
import re
import signal
import subprocess
import sys
import time

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
N, ITER = 8, int(os.environ.get("HETC_KILL_LOOP_ITER", "20"))
work = rc.workdir()
out = os.path.join(work, "build")
p = rc.compile_tiny(HETC, SRC, out, steps=N)
if not rc.check(p.returncode == 0, "hetc compile: %s" % p.stderr[-2000:]):
    rc.finish()
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")


def losses(text):
    return dict(re.findall(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M))


p = rc.launch(out, SRC, N, "--checkpoint-dir", os.path.join(work, "ref"))
ref = losses(p.stdout)
if not rc.check(p.returncode == 0 and len(ref) == N, "reference: %s" % p.stderr[-1000:]):
    rc.finish()


def stage_pids():
    """This build's running stage ranks (the build directory is this test's)."""
    q = subprocess.run(["pgrep", "-f", os.path.join(out, "stage_")], capture_output=True,
                       text=True)
    return [int(x) for x in q.stdout.split()]


rng = random.Random(16)
resumed, refused, inside = 0, 0, 0
for it in range(ITER):
    ck = os.path.join(work, "ck%d" % it)
    after, delay = rng.randint(1, N - 2), rng.uniform(0.0, 0.03)
    job = subprocess.Popen([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(N),
                            "--checkpoint-dir", ck, "--checkpoint-every", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           start_new_session=True)
    while True:
        line = job.stdout.readline()
        if not line or re.match(r"step\s+%d/" % after, line):
            break
    time.sleep(delay)  # into the checkpoint of step `after`, or past it
    pids = stage_pids()
    if pids:
        os.kill(rng.choice(pids), signal.SIGKILL)
    try:
        job.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        rc.fail("iteration %d: the job hung after a rank was killed" % it)
    for pid in stage_pids():  # ranks mpirun left dying: gone before the resume
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p = rc.launch(out, SRC, N, "--checkpoint-dir", ck, "--resume")
    got = losses(p.stdout)
    m = re.search(r"resuming from \S+ \(step (\d+)\)", p.stdout)
    if p.returncode == 0:
        start = int(m.group(1)) if m else 0
        want = {str(s): ref[str(s)] for s in range(start + 1, N + 1)}
        rc.check(got == want, "iteration %d (killed after step %d + %.3f s): resumed from step "
                 "%d, losses %s, the uninterrupted run's %s" % (it, after, delay, start, got, want))
        resumed += 1
        inside += start < after  # the kill beat step `after`'s checkpoint
    else:
        rc.check(re.search(r"step_\d+|layer_\d+|MANIFEST", p.stderr) is not None,
                 "iteration %d: the resume failed without naming a file: %s"
                 % (it, p.stderr[-800:]))
        refused += 1
print("%d kills: %d resumed bit-identically (%d of them before the killed step's checkpoint "
      "was complete), %d refused naming a file" % (ITER, resumed, inside, refused))
rc.finish()
