"""Build identity (issue 16 item 7): a mixed build never runs.

- every hetc compile has a build id that launch.sh and every stage binary
  carry (`stage_K --build-id`); two compiles into one directory get two;
- one stage binary of the previous compile copied over the new one:
  launch.sh refuses naming it, and so does the runtime (all ranks compare
  the id at start-up) when the job is started without launch.sh;
- a compile SIGKILLed once its first stage binary exists leaves the old
  build byte-for-byte intact and runnable; the next compile clears the
  killed one's leftovers (no DIR.building-*, no stray .o) and keeps a
  user's file in DIR.

usage: test_build_identity.py HETC SOURCE_DIR
"""
import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
work = rc.workdir()
D = os.path.join(work, "build")


def compile_into(lr, timeout=600):
    return rc.compile_tiny(HETC, SRC, D, steps=4, extra=("--lr", lr), timeout=timeout)


def ids():
    """launch.sh's build id and each stage binary's."""
    text = open(os.path.join(D, "launch.sh")).read()
    m = re.search(r"^build_id=(\w+)", text, re.M)
    stages = sorted(glob.glob(os.path.join(D, "stage_[0-9]*")))
    return (m.group(1) if m else None,
            [rc.run([s, "--build-id"]).stdout.strip() for s in stages])


def snapshot():
    out = {}
    for root, _, files in os.walk(D):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, D)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


p = compile_into("1e-3")
if not rc.check(p.returncode == 0, "first compile: %s" % p.stderr[-2000:]):
    rc.finish()
id_a, st_a = ids()
rc.check(id_a and len(st_a) >= 2 and all(s == id_a for s in st_a),
         "first build: launch.sh id %s, stage ids %s" % (id_a, st_a))
old_stage_1 = os.path.join(work, "old_stage_1")
shutil.copy2(os.path.join(D, "stage_1"), old_stage_1)
for name in ("notes.txt", "stage_notes.txt"):  # a user's files: not hetc's stage_K*
    with open(os.path.join(D, name), "w") as f:
        f.write("a user's file\n")

p = compile_into("2e-3")
if not rc.check(p.returncode == 0, "second compile: %s" % p.stderr[-2000:]):
    rc.finish()
id_b, st_b = ids()
rc.check(id_b and id_b != id_a and all(s == id_b for s in st_b),
         "second build: launch.sh id %s (first %s), stage ids %s" % (id_b, id_a, st_b))
rc.check(all(os.path.isfile(os.path.join(D, n)) for n in ("notes.txt", "stage_notes.txt")),
         "the recompile dropped a user's file")

# one old stage binary in the new build
shutil.copy2(old_stage_1, os.path.join(D, "stage_1"))
p = rc.launch(D, SRC, 1, "--checkpoint-dir", os.path.join(work, "ck1"))
rc.check(p.returncode != 0 and "stage_1 is from another hetc compile" in p.stderr and
         id_a in p.stderr and id_b in p.stderr,
         "launch.sh ran a mixed build: rc=%d %s" % (p.returncode, p.stderr[-800:]))
# the same job without launch.sh's check: the ranks compare the id
ranks = [int(x) for x in re.search(r"^stages=\(([\d ]+)\)", open(os.path.join(D, "launch.sh")).read(),
                                   re.M).group(1).split()]
cmd = ["mpirun", "--oversubscribe", "--bind-to", "none"]
if os.getuid() == 0:
    cmd.append("--allow-run-as-root")
for s, n in enumerate(ranks):
    cmd += ([":"] if s else []) + ["-np", str(n), os.path.join(D, "stage_%d" % s), "--data",
                                   os.path.join(SRC, "examples", "tiny_corpus.bin"), "--steps", "1",
                                   "--checkpoint-dir", os.path.join(work, "ck2")]
p = rc.run(cmd, timeout=300, env={"HETRT_TIMEOUT_S": "60"})
rc.check(p.returncode != 0 and "different hetc compiles" in p.stderr and
         "stage 1 binary %s: build id %s" % (os.path.join(D, "stage_1"), id_a) in p.stderr,
         "the ranks of a mixed build started training: rc=%d %s" % (p.returncode, p.stderr[-1500:]))

# compiles killed at several points (the plan written, each stage binary
# linked, the launchers written): the old build stays byte-for-byte intact
p = compile_into("2e-3")
rc.check(p.returncode == 0, "third compile: %s" % p.stderr[-2000:])
before = snapshot()
nst = len(glob.glob(os.path.join(D, "stage_[0-9]")))
for mark in ["plan.json"] + ["stage_%d" % k for k in range(nst)] + ["launch.sh"]:
    t0 = time.time()
    pr = subprocess.Popen(rc.pinned([HETC, os.path.join(SRC, "examples", "gpt_tiny.onnx"),
                           os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml"), "--seq",
                           "16", "--microbatch", "2", "--global-batch", "4", "--threads", "2",
                           "--steps", "4", "--lr", "3e-3", "-o", D]), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    seen = False
    while pr.poll() is None and time.time() - t0 < 300:
        new = glob.glob(D + ".building-*/" + mark) + [
            x for x in [os.path.join(D, mark)] if os.path.getmtime(x) > t0]
        if new:
            seen = True
            break
        time.sleep(0.002)
    if pr.poll() is None:
        os.killpg(pr.pid, signal.SIGKILL)  # hetc and its linker
    pr.wait()
    rc.check(seen, "kill at %s: the compile never wrote it (finished first?)" % mark)
    after = snapshot()
    rc.check(after == before, "a compile killed at %s changed the build: %s" % (mark, sorted(
        k for k in set(before) | set(after) if before.get(k) != after.get(k))))
    print("compile killed once %s existed: the old build is unchanged" % mark, flush=True)
p = rc.launch(D, SRC, 1, "--checkpoint-dir", os.path.join(work, "ck3"))
rc.check(p.returncode == 0, "the old build does not run after the killed compiles: %s" %
         p.stderr[-800:])

# the next compile clears the leftovers
p = compile_into("3e-3")
rc.check(p.returncode == 0, "compile after the kill: %s" % p.stderr[-2000:])
left = glob.glob(D + ".building-*") + glob.glob(os.path.join(D, "*.o"))
rc.check(not left, "leftovers of the killed compile: %s" % left)
rc.check(os.path.isfile(os.path.join(D, "notes.txt")), "a user's file lost")

# -o . cannot be swapped from under the user: written in place, with a warning
p = rc.run([HETC, os.path.join(SRC, "examples", "gpt_tiny.onnx"),
            os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml"), "--seq", "16",
            "--microbatch", "2", "--global-batch", "4", "--threads", "2", "--steps", "4",
            "-o", "."], cwd=D, timeout=600)
id_c, st_c = ids()
rc.check(p.returncode == 0 and "written in place" in p.stderr and id_c and
         all(s == id_c for s in st_c) and os.path.isfile(os.path.join(D, "notes.txt")),
         "-o . (the current directory): rc=%d ids %s %s %s" % (p.returncode, id_c, st_c,
                                                            p.stderr[-600:]))
rc.finish()
