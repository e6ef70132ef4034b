"""hetc train with the largest warm-up (issue 16 item 4): W + 1 overflowed
int64 in rt_lr_at (UBSan), and the release build trained with a negative
learning rate.  Oracle: nanoGPT's get_lr in exact Python integers
(tests/train_kernels/np_oracle.py).

usage: test_lr_extremes.py HETC SOURCE_DIR
"""
import os
import re
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tests", "train_kernels"))
import np_oracle  # noqa: E402

MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")

for W in (2 ** 63 - 1, 2 ** 62):
    p = rc.run([HETC, "train", MODEL, "--data", DATA, "--steps", "2", "--microbatch", "2",
                "--seq", "16", "--lr", "1e-3", "--lr-schedule", "cosine", "--warmup", str(W),
                "--no-checkpoint"])
    lrs = [float(x) for x in re.findall(r"\| lr (\S+) \|", p.stdout)]
    rc.check(p.returncode == 0 and len(lrs) == 2, "--warmup %d: rc=%d %s %s"
             % (W, p.returncode, p.stdout[-400:], p.stderr[-400:]))
    for i, lr in enumerate(lrs):
        want = np_oracle.nanogpt_get_lr(i, 1e-3, W, 2, 1e-4)  # decay span 0: warm-up only
        rc.check(lr > 0 and abs(lr - want) <= 1e-4 * want,
                 "--warmup %d step %d: lr %r, nanoGPT's get_lr %r" % (W, i + 1, lr, want))
rc.finish()
