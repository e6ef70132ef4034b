#!/usr/bin/env python3
"""hetrt_stage_main end to end on the hand-compiled two-stage program
(test_stage_mlp.c), under mpirun:

  - per-step loss and grad norm of DP layouts {1,1} {2,1} {1,2} match the
    single-process reference (unpartitioned model through hexec_run) to 1e-5;
  - a run stopped at step 3 and resumed to 6 reproduces the uninterrupted run
    bit for bit (log lines and final checkpoint files);
  - bad launches fail fast with a clear message and a non-zero exit.

usage: test_stage_mlp.py MPIEXEC NP_FLAG TEST_BINARY WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys

mpiexec, npflag, binary, work = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, HETRT_TIMEOUT_S="20")
data = os.path.join(work, "data.bin")
init = os.path.join(work, "init")
STEPS = 6
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(cmd, timeout=90):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       timeout=timeout, universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


def launch(d0, d1, opts, np0=None, np1=None):
    cmd = [mpiexec, "--oversubscribe"]
    for s, np in ((0, np0 or d0), (1, np1 or d1)):
        if s:
            cmd.append(":")
        cmd += [npflag, str(np), binary, "stage", str(s), str(d0), str(d1)] + opts
    return run(cmd)


STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \| grad norm (\S+) \| lr (\S+) \|")


def steps_of(out):
    return [m.groups() for m in map(STEP_RE.match, out.splitlines()) if m]


rc, out, err = run([binary, "gen", work])
check(rc == 0, "gen failed: " + err)
rc, out, err = run([binary, "ref", data, str(STEPS)])
check(rc == 0, "reference failed: " + err)
ref = steps_of(out)
check(len(ref) == STEPS, "reference printed %d step lines" % len(ref))


def close(a, b, tol=1e-5):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


base = ["--data", data, "--init", init]
runs = {}
for d0, d1 in ((1, 1), (2, 1), (1, 2)):
    ck = os.path.join(work, "ck_%d_%d" % (d0, d1))
    rc, out, err = launch(d0, d1, base + ["--checkpoint-dir", ck])
    got = steps_of(out)
    runs[(d0, d1)] = got
    check(rc == 0, "layout %d,%d exited %d: %s" % (d0, d1, rc, err[-2000:]))
    check(len(got) == STEPS, "layout %d,%d printed %d step lines" % (d0, d1, len(got)))
    for g, r in zip(got, ref):
        check(g[0] == r[0] and g[1] == r[1], "layout %d,%d step numbering %s vs %s" % (d0, d1, g, r))
        check(close(g[2], r[2]), "layout %d,%d step %s loss %s vs reference %s" % (d0, d1, g[0], g[2], r[2]))
        check(close(g[3], r[3]), "layout %d,%d step %s grad norm %s vs reference %s" % (d0, d1, g[0], g[3], r[3]))
        check(g[4] == r[4], "layout %d,%d step %s lr %s vs reference %s" % (d0, d1, g[0], g[4], r[4]))
    print("layout %d,%d: %s" % (d0, d1, " ".join(x[2] for x in got)))
check(float(ref[-1][2]) < float(ref[0][2]) - 0.05, "the reference loss does not fall: %s" % ref)

# Resume: 3 steps, then --resume to 6, against the uninterrupted {2,1} run.
ckr = os.path.join(work, "ck_resume")
rc, out1, err = launch(2, 1, base + ["--checkpoint-dir", ckr, "--steps", "3"])
check(rc == 0, "resume part 1 exited %d: %s" % (rc, err[-2000:]))
check(os.path.isfile(os.path.join(ckr, "step_00000003", "MANIFEST")), "no checkpoint at step 3")
rc, out2, err = launch(2, 1, base + ["--checkpoint-dir", ckr, "--steps", "6", "--resume",
                                     "--checkpoint-every", "2"])
check(rc == 0, "resume part 2 exited %d: %s" % (rc, err[-2000:]))
check("resuming from" in out2, "resumed run does not say it resumed: " + out2)
full = runs[(2, 1)]
got = steps_of(out1) + steps_of(out2)
check([g[0] for g in got] == [str(i) for i in range(1, 4)] + [str(i) for i in range(4, 7)],
      "resumed step numbers: %s" % [g[0] for g in got])
for g, f in zip(got, full):
    check(g[2:] == f[2:], "resumed step %s: %s vs uninterrupted %s" % (g[0], g[2:], f[2:]))
def without_run_id(blob):
    """A layer file minus what differs between two runs of the same
    training: the run id (header bytes 40..48) and the header checksum
    that covers it (the 8 bytes before header_bytes, a u32 at 28)."""
    hb = int.from_bytes(blob[28:32], "little")
    return blob[:40] + blob[48:hb - 8] + blob[hb:], int.from_bytes(blob[40:48], "little")


for layer in range(0, 4):
    a = os.path.join(work, "ck_2_1", "step_00000006", "layer_%05d.bin" % layer)
    b = os.path.join(ckr, "step_00000006", "layer_%05d.bin" % layer)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        (da, ra), (db, rb) = without_run_id(fa.read()), without_run_id(fb.read())
        check(da == db, "layer %d of the resumed checkpoint differs" % layer)
        check(ra != rb and ra and rb, "layer %d: run ids %x and %x of two runs" % (layer, ra, rb))
    with open(os.path.join(ckr, "step_00000003", "layer_%05d.bin" % layer), "rb") as f3:
        check(without_run_id(f3.read())[1] == rb,
              "layer %d: the resumed run changed its run id" % layer)
check(os.path.isfile(os.path.join(ckr, "step_00000004", "MANIFEST")),
      "--checkpoint-every 2 wrote no step 4")

# --resume with nothing to resume from starts fresh and says so.
rc, out, err = launch(1, 1, base + ["--checkpoint-dir", os.path.join(work, "empty"), "--resume",
                                    "--steps", "1"])
check(rc == 0 and "no checkpoint in" in out, "fresh --resume: rc %d out %s err %s" % (rc, out, err))
check(steps_of(out)[:1] == [("1", "1") + ref[0][2:]] or
      (steps_of(out) and close(steps_of(out)[0][2], ref[0][2])), "fresh --resume step 1: " + out)

# Errors: non-zero exit, a message naming the problem, no hang.
def expect_error(what, rc, err, *needles):
    check(rc != 0, "%s: exit status 0" % what)
    for n in needles:
        check(n in err, "%s: stderr lacks %r: %s" % (what, n, err[-1500:]))
    print("%s: rc %d, %s" % (what, rc, next((l for l in err.splitlines() if any(n in l for n in needles)), "?")))


# (option and ABI errors come before MPI starts: no launcher needed)
rc, out, err = run([binary, "stage", "0", "1", "1", "--init", init])
expect_error("missing --data", rc, err, "--data")
rc, out, err = run([binary, "stage", "0", "1", "1"] + base + ["--bogus"])
expect_error("unknown option", rc, err, "'--bogus'")
rc, out, err = launch(1, 1, ["--data", os.path.join(work, "nope.bin"), "--init", init])
expect_error("missing data file", rc, err, "nope.bin")
rc, out, err = launch(2, 1, base, np0=1)
expect_error("world size mismatch", rc, err, "3 ranks", "has 2")
rc, out, err = launch(1, 1, ["--data", data, "--init", os.path.join(work, "noinit")])
expect_error("no initial parameters", rc, err, "initial parameters", "noinit")
rc, out, err = run([binary, "gen", work, "bad"])
check(rc == 0, "gen bad failed: " + err)
rc, out, err = launch(1, 1, ["--data", data, "--init", os.path.join(work, "init_bad")])
expect_error("checkpoint mismatch", rc, err, "'w1'", "init_bad/step_00000000")
env["TEST_STAGE_ABI"] = "1"
rc, out, err = run([binary, "stage", "0", "1", "1"] + base)
expect_error("ABI mismatch", rc, err, "ABI version 1")
del env["TEST_STAGE_ABI"]

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("ok")
