"""A FIFO (named pipe) as any input (issue 16 item 9): open(2) for reading
blocked until a writer came, forever, before any timeout could run.  Every
input is now opened with O_NONBLOCK and fstat'ed (common/input_file.h): a
non-regular file is refused at once with a message naming the file and what
it is.  Each command runs under a timeout, so a regression fails instead of
hanging the suite.

usage: test_fifo_inputs.py HETC SOURCE_DIR CKPT_TOOL
"""
import os
import shutil
import sys

import rel_common as rc

HETC, SRC, CKPT = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(SRC, "examples", "clusters", "case_study.yaml")
PLAN_ARGS = ["--seq", "16", "--microbatch", "2", "--global-batch", "8", "--threads", "1"]
tmp = rc.workdir()
TIMEOUT = 20


def fifo(name):
    p = os.path.join(tmp, name)
    os.mkfifo(p)
    return p


def refused(what, args, name, kind="a FIFO (named pipe)"):
    p = rc.run(args, timeout=TIMEOUT)
    msg = p.stdout + p.stderr
    rc.check(p.returncode not in (0, -9) and name in msg and kind in msg,
             "%s: expected a refusal naming %s and '%s', got rc=%d: %s"
             % (what, name, kind, p.returncode, msg[-600:]))


# the model
m = fifo("model.onnx")
refused("hetc import FIFO", [HETC, "import", m, "--batch", "2", "--seq", "16"], "model.onnx")
refused("hetc train FIFO", [HETC, "train", m, "--data", DATA, "--steps", "1"], "model.onnx")
# a directory is refused the same way
d = os.path.join(tmp, "dir.onnx")
os.mkdir(d)
refused("hetc import DIR", [HETC, "import", d, "--batch", "2", "--seq", "16"], "dir.onnx",
        "a directory")
# cluster.yaml
refused("hetc plan MODEL FIFO", [HETC, "plan", MODEL, fifo("cluster.yaml"), *PLAN_ARGS,
                                 "-o", os.path.join(tmp, "o1")], "cluster.yaml")
# --profile-db
refused("--profile-db FIFO", [HETC, "plan", MODEL, CLUSTER, *PLAN_ARGS, "--profile-db",
                              fifo("db.json"), "-o", os.path.join(tmp, "o2")], "db.json")
# --plan
refused("hetc compile --plan FIFO", [HETC, "compile", MODEL, CLUSTER, *PLAN_ARGS, "--plan",
                                     fifo("plan.json"), "-o", os.path.join(tmp, "o3")],
        "plan.json")
# --data
refused("hetc train --data FIFO", [HETC, "train", MODEL, "--data", fifo("tokens.bin"),
                                   "--steps", "1", "--microbatch", "2", "--seq", "16",
                                   "--no-checkpoint"], "tokens.bin")
# hetc run --input
refused("hetc run --input FIFO", [HETC, "run", MODEL, "--input", "input_ids=" + fifo("ids.npy"),
                                  "--output-dir", os.path.join(tmp, "o4")], "ids.npy")

# checkpoints: a complete step 1, then step 2 whose MANIFEST is a FIFO: the
# newest complete step is still 1 (found without blocking); a layer file
# that is a FIFO is refused by name
ck = os.path.join(tmp, "ckpt")
p = rc.run([CKPT, "write", ck, "1"], timeout=TIMEOUT)
rc.check(p.returncode == 0, "ckpt write: %s %s" % (p.stdout, p.stderr))
os.makedirs(os.path.join(ck, "step_00000002"))
shutil.copy(os.path.join(ck, "step_00000001", "layer_00000.bin"), os.path.join(ck, "step_00000002"))
os.mkfifo(os.path.join(ck, "step_00000002", "MANIFEST"))
p = rc.run([CKPT, "latest", ck], timeout=TIMEOUT)
rc.check(p.returncode == 0 and p.stdout.strip() == "step 1",
         "latest with a FIFO MANIFEST: rc=%d %s" % (p.returncode, p.stdout + p.stderr))
lay = os.path.join(ck, "step_00000001", "layer_00000.bin")
os.unlink(lay)
os.mkfifo(lay)
p = rc.run([CKPT, "read", os.path.join(ck, "step_00000001"), "0"], timeout=TIMEOUT)
rc.check(p.returncode == 1 and "layer_00000.bin" in p.stdout and "FIFO" in p.stdout,
         "layer file FIFO: rc=%d %s" % (p.returncode, p.stdout + p.stderr))
rc.finish()
