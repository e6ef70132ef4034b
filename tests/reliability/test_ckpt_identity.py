"""Checkpoint identity (issue 16 item 6): a resume never trains on a mixture.

- a layer file copied from step 2 into the newest step 7 (same size: the
  MANIFEST's size check passed it), and a layer file of another run at the
  same step (identical but for the run id), are skipped with a warning:
  --resume falls back to step 6 and its step 7 equals the uninterrupted
  run's bit for bit;
- a flipped data byte in the newest step (tensor checksum) falls back too;
- a step directory being rewritten loses its MANIFEST before its first new
  layer file lands (ckpt_tool: a rewrite killed before its MANIFEST);
- a fresh run into a directory holding checkpoints is refused (naming
  --resume and --overwrite-checkpoints); --overwrite-checkpoints deletes them;
- the directory is locked: a second launch into it (and ckpt_tool lock)
  refuses naming the holder's pid, and the lock dies with its holder.

Oracle: the uninterrupted run's printed losses (the same binaries, the same
data: a resume from step 6 must reproduce step 7 exactly).

usage: test_ckpt_identity.py HETC SOURCE_DIR CKPT_TOOL
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import rel_common as rc

HETC, SRC, TOOL = sys.argv[1], sys.argv[2], sys.argv[3]
work = rc.workdir()
out = os.path.join(work, "build")
p = rc.compile_tiny(HETC, SRC, out, steps=8)
if not rc.check(p.returncode == 0, "hetc compile: %s" % p.stderr[-2000:]):
    rc.finish()
N = 7


def losses(text):
    return dict(re.findall(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M))


def step_dir(ck, s):
    return os.path.join(ck, "step_%08d" % s)


def layer(ck, s, L=1):
    return os.path.join(step_dir(ck, s), "layer_%05d.bin" % L)


ref_ck = os.path.join(work, "ref")
p = rc.launch(out, SRC, N, "--checkpoint-dir", ref_ck, "--checkpoint-every", "1")
ref = losses(p.stdout)
if not rc.check(p.returncode == 0 and len(ref) == N, "reference run: %s" % p.stderr[-2000:]):
    rc.finish()
other_ck = os.path.join(work, "other")  # a second run: same bytes but the run id
p = rc.launch(out, SRC, N, "--checkpoint-dir", other_ck, "--checkpoint-every", "1")
rc.check(p.returncode == 0 and losses(p.stdout) == ref, "second run differs: %s" % p.stderr[-800:])


def resume_after(label, break_it, needle):
    """A copy of the reference checkpoints, broken at step N, resumed to
    step N: it must warn naming the step (and needle), resume from step N-1
    and print step N's loss equal to the reference's."""
    ck = os.path.join(work, label)
    shutil.copytree(ref_ck, ck)
    break_it(ck)
    p = rc.launch(out, SRC, N, "--checkpoint-dir", ck, "--resume")
    got = losses(p.stdout)
    warn = [l for l in p.stderr.splitlines() if l.startswith("warning:")]
    rc.check(p.returncode == 0 and got == {str(N): ref[str(N)]},
             "%s: rc=%d, losses %s, the uninterrupted step %d %s\n%s" %
             (label, p.returncode, got, N, ref[str(N)], p.stderr[-1500:]))
    rc.check("resuming from %s (step %d)" % (step_dir(ck, N - 1), N - 1) in p.stdout,
             "%s: did not resume from step %d: %s" % (label, N - 1, p.stdout[-600:]))
    rc.check(any("step_%08d" % N in w and needle in w for w in warn),
             "%s: no warning naming step_%08d and %r: %s" % (label, N, needle, p.stderr[-1500:]))
    if got == {str(N): ref[str(N)]}:
        print("%s: fell back to step %d, step %d loss %s == uninterrupted" %
              (label, N - 1, N, got.get(str(N))), flush=True)


resume_after("other_step", lambda ck: shutil.copy(layer(ck, 2), layer(ck, N)), "step 2")
resume_after("other_run", lambda ck: shutil.copy(layer(other_ck, N), layer(ck, N)), "run")


def flip_last_byte(ck):
    with open(layer(ck, N), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))


resume_after("checksum", flip_last_byte, "corrupt")

# a rewrite killed between its first layer file and its MANIFEST
d = os.path.join(work, "rewrite")
p = rc.run([TOOL, "write", d, "5"])
q = rc.run([TOOL, "latest", d])
rc.check(p.stdout.strip() == "ok" and q.stdout.strip() == "step 5", "ckpt_tool write/latest: %s %s"
         % (p.stdout, q.stdout))
p = rc.run([TOOL, "layer", d, "5"])
q = rc.run([TOOL, "latest", d])
rc.check(q.stdout.strip() == "none",
         "a step rewritten without its MANIFEST still counts (old MANIFEST kept): %s" % q.stdout)

# a fresh run into a used directory
ck = os.path.join(work, "used")
shutil.copytree(ref_ck, ck)
p = rc.launch(out, SRC, 2, "--checkpoint-dir", ck)
rc.check(p.returncode != 0 and "already holds checkpoints" in p.stderr and ck in p.stderr and
         "--resume" in p.stderr and "--overwrite-checkpoints" in p.stderr,
         "a fresh run into a used checkpoint directory: rc=%d %s" % (p.returncode, p.stderr[-800:]))
rc.check(os.path.isdir(step_dir(ck, N)), "the refused run touched the old checkpoints")
p = rc.launch(out, SRC, 2, "--checkpoint-dir", ck, "--overwrite-checkpoints")
left = sorted(x for x in os.listdir(ck) if x.startswith("step_"))
rc.check(p.returncode == 0 and losses(p.stdout) == {"1": ref["1"], "2": ref["2"]} and
         left == ["step_00000002"],
         "--overwrite-checkpoints: rc=%d steps left %s %s" % (p.returncode, left, p.stderr[-800:]))

# the lock: ckpt_tool holds it, then a running job holds it
ck = os.path.join(work, "locked")
holder = subprocess.Popen([TOOL, "lock", ck], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
rc.check(holder.stdout.readline().strip() == "locked", "ckpt_tool lock failed")
FAST = {"HETRT_LOCK_WAIT_S": "1"}  # a held lock is waited for (a dying job's rank)
p = rc.launch(out, SRC, 1, "--checkpoint-dir", ck, env=FAST)
rc.check(p.returncode != 0 and "in use by another run" in p.stderr and
         "pid %d " % holder.pid in p.stderr,
         "a launch into a locked directory: rc=%d %s" % (p.returncode, p.stderr[-800:]))
holder.stdin.close()
holder.wait(timeout=60)

ck = os.path.join(work, "shared")
first = subprocess.Popen([os.path.join(out, "launch.sh"), "--data",
                          os.path.join(SRC, "examples", "tiny_corpus.bin"), "--steps", "1000000",
                          "--checkpoint-dir", ck], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
try:
    line = ""
    while not line.startswith("step "):  # past start-up: it holds the lock
        line = first.stdout.readline()
        if not line:
            break
    rc.check(line.startswith("step "), "the first launch did not start training")
    p = rc.launch(out, SRC, 1, "--checkpoint-dir", ck, env=FAST)
    rc.check(p.returncode != 0 and "in use by another run" in p.stderr and
             re.search(r"pid \d+ on ", p.stderr) is not None,
             "two launches into one directory: the second ran (rc=%d) %s" %
             (p.returncode, p.stderr[-800:]))
finally:
    # the holder named in LOCK is the job's rank 0: kill it by that pid (mpirun
    # may have put it in a session of its own), then launch.sh's session
    m = re.match(r"pid (\d+) ", open(os.path.join(ck, "LOCK")).read())
    if m:
        try:
            os.kill(int(m.group(1)), signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate()
    for _ in range(600):  # the killed rank is gone once /proc forgets it
        if not m or not os.path.exists("/proc/%s" % m.group(1)):
            break
        time.sleep(0.1)
p = rc.launch(out, SRC, 1, "--checkpoint-dir", ck)
rc.check(p.returncode == 0, "the lock outlived its holder: %s" % p.stderr[-800:])
rc.finish()
