"""A token file truncated while hetc train reads it (issue 16 item 5): the
loader mapped the file, so the next batch past the new end killed the rank
with SIGBUS.  Rows are now read with pread: the run must stop with exit 1
and a message naming the file and what changed.

usage: test_data_truncate.py HETC SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
tmp = rc.workdir()
data = os.path.join(tmp, "tokens.bin")
shutil.copy(os.path.join(SRC, "examples", "tiny_corpus.bin"), data)

e = dict(os.environ, OPENBLAS_NUM_THREADS="1")
e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":exitcode=86"
p = subprocess.Popen(rc.pinned([HETC, "train", MODEL, "--data", data, "--steps", "1000000", "--microbatch",
                      "2", "--seq", "16", "--no-checkpoint"]), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, env=e)
try:
    # wait until training is in its step loop, then cut the file to its
    # header and 100 tokens: every later batch lies past the end
    line = p.stdout.readline()
    while line and not line.startswith("step "):
        line = p.stdout.readline()
    rc.check(line.startswith("step "), "hetc train never reached a step: %r" % line)
    os.truncate(data, 1024 + 200)
    out, err = p.communicate(timeout=120)
except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
    rc.fail("hetc train did not stop within 120 s after the truncation")
rc.check(p.returncode == 1, "exit %d after truncation (SIGBUS is -7): %s" % (p.returncode, err[-600:]))
rc.check("tokens.bin" in err and "changed under the run" in err and "now 1224" in err,
         "message: %s" % err[-600:])
rc.check("Sanitizer" not in err, "sanitizer report: %s" % err[-2000:])
rc.finish()
