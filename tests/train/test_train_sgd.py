"""hetc train --optimizer sgd, one step, against numpy: the exported weights
must be p - lr * (c * g + wd * p) with g the dumped (torch-checked, see
test_train_ref.py) batch-0 gradient, c = min(1, clip / (|g| + 1e-6)) and
weight decay on rank >= 2 parameters only (torch.optim.SGD, first step:
the momentum buffer is d itself).  Also checks --loss xent:ignore=N is
accepted and bad options fail with a message.

    test_train_sgd.py HETC SOURCE_DIR
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper

HETC, SRC = sys.argv[1], sys.argv[2]
model = os.path.join(SRC, "tests/models/llama_op17.onnx")
tmp = tempfile.mkdtemp(prefix="hetc_sgd_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends
lr, wd, clip = 0.05, 0.1, 0.5
r = subprocess.run([HETC, "train", model, "--precision", "fp32", "--data", os.path.join(SRC, "examples/tiny_corpus.bin"),
                    "--steps", "1", "--microbatch", "2", "--seq", "16", "--optimizer", "sgd",
                    "--lr", str(lr), "--weight-decay", str(wd), "--clip", str(clip),
                    "--momentum", "0.9", "--dump-grads", os.path.join(tmp, "g"),
                    "--no-checkpoint", "--export", os.path.join(tmp, "t.onnx")],
                   capture_output=True, text=True)
fails = []
if r.returncode:
    print(r.stdout, r.stderr)
    sys.exit(1)
before = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64)
          for t in onnx.load(model).graph.initializer}
after = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64)
         for t in onnx.load(os.path.join(tmp, "t.onnx")).graph.initializer}
grads = {}
for f in os.listdir(os.path.join(tmp, "g")):
    if f.startswith("grad_"):
        grads[f[5:-4]] = np.load(os.path.join(tmp, "g", f)).astype(np.float64)
norm = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
c = min(1.0, clip / (norm + 1e-6))
worst, n = 0.0, 0
for name, p in before.items():
    key = name.replace("/", "_").replace(":", "_")
    if key not in grads:
        continue
    d = c * grads[key] + (wd * p if p.ndim >= 2 else 0)
    want = p - lr * d
    e = np.abs(after[name] - want).max() / max(np.abs(want - p).max(), 1e-12)
    worst, n = max(worst, e), n + 1
    if e > 1e-3:
        fails.append("%s: update off by %.2e of its size" % (name, e))
if n != len(grads) or n == 0:
    fails.append("compared %d parameters of %d gradients" % (n, len(grads)))
# option handling
r = subprocess.run([HETC, "train", model, "--precision", "fp32", "--data", os.path.join(SRC, "examples/tiny_corpus.bin"),
                    "--steps", "1", "--microbatch", "2", "--seq", "16", "--loss", "xent:ignore=3",
                    "--no-checkpoint", "--quiet"], capture_output=True, text=True)
if r.returncode or "loss" not in r.stdout:
    fails.append("--loss xent:ignore=3 failed: " + r.stderr)
for bad, msg in ((["--optimizer", "lion"], "adamw or sgd"), (["--loss", "mse"], "xent"),
                 (["--lr-schedule", "step"], "constant or cosine"),
                 (["--data", os.path.join(SRC, "tests/models/llama.json")], "")):
    r = subprocess.run([HETC, "train", model, "--precision", "fp32", "--data",
                        os.path.join(SRC, "examples/tiny_corpus.bin"), "--steps", "1",
                        "--no-checkpoint"] + bad, capture_output=True, text=True)
    if r.returncode == 0 or msg not in r.stderr or "hetc train" not in r.stderr:
        fails.append("%s: exit %d, stderr %r" % (bad, r.returncode, r.stderr[-300:]))
print("SGD step: %d parameters, max error %.2e of the update size" % (n, worst))
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
