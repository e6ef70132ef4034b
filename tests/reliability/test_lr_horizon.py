"""launch.sh --steps beyond the compiled --steps (issue 16 item 8): the
cosine schedule decays over hetc compile's --steps, so the extra steps
trained at its minimum lr without a word.  Now the last stage warns at
start-up naming both numbers, and --lr-horizon N stretches the schedule.
Oracle: nanoGPT's get_lr (tests/train_kernels/np_oracle.py).

usage: test_lr_horizon.py HETC SOURCE_DIR
"""
import os
import re
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tests", "train_kernels"))
import np_oracle  # noqa: E402

LR, W, COMPILED, RUN = 1e-3, 1, 3, 6
work = rc.workdir()
out = os.path.join(work, "build")
p = rc.compile_tiny(HETC, SRC, out, steps=COMPILED)
if not rc.check(p.returncode == 0, "hetc compile: %s" % p.stderr[-2000:]):
    rc.finish()


def lrs(p):
    return [float(x) for x in re.findall(r"\| lr (\S+) \|", p.stdout)]


def expect_lrs(p, label, horizon):
    got = lrs(p)
    rc.check(p.returncode == 0 and len(got) == RUN, "%s: rc=%d, %d lr values: %s %s"
             % (label, p.returncode, len(got), p.stdout[-600:], p.stderr[-600:]))
    for k, lr in enumerate(got):
        want = np_oracle.nanogpt_get_lr(k, LR, W, horizon, LR * 0.1)
        rc.check(abs(lr - want) <= 1e-3 * want,  # printed with 4 significant digits
                 "%s step %d: lr %r, nanoGPT's get_lr %r" % (label, k + 1, lr, want))


# past the compiled horizon: a warning naming both numbers and the flag
p = rc.launch(out, SRC, RUN, "--checkpoint-dir", os.path.join(work, "ck1"))
expect_lrs(p, "--steps %d" % RUN, COMPILED)
warn = [l for l in p.stderr.splitlines() if l.startswith("warning:")]
rc.check(len(warn) == 1 and "--steps %d" % RUN in warn[0] and
         "--steps %d" % COMPILED in warn[0] and "--lr-horizon %d" % RUN in warn[0] and
         "minimum lr" in warn[0],
         "no (or an unclear) warning past the compiled horizon: %r" % p.stderr[-800:])

# --lr-horizon stretches the schedule: no warning, the lr of a 6-step schedule
p = rc.launch(out, SRC, RUN, "--lr-horizon", str(RUN), "--checkpoint-dir",
              os.path.join(work, "ck2"))
expect_lrs(p, "--lr-horizon %d" % RUN, RUN)
rc.check("warning:" not in p.stderr, "--lr-horizon %d still warns: %r" % (RUN, p.stderr[-400:]))

# within the compiled horizon: no warning
p = rc.launch(out, SRC, COMPILED, "--checkpoint-dir", os.path.join(work, "ck3"))
rc.check(p.returncode == 0 and "warning:" not in p.stderr,
         "--steps %d (the compiled horizon) warns or fails: %r" % (COMPILED, p.stderr[-400:]))

# a bad --lr-horizon is an option error
p = rc.launch(out, SRC, RUN, "--lr-horizon", "0", "--checkpoint-dir", os.path.join(work, "ck4"))
rc.check(p.returncode != 0 and "--lr-horizon" in p.stderr, "--lr-horizon 0 accepted: %r"
         % p.stderr[-400:])
rc.finish()
