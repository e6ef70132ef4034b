"""hetc train against PyTorch (tests/models/*.train_ref.npz, written by the
test-model script from the models' own torch code and weights):

  - loss and the gradient of every parameter for batch 0 (--dump-grads),
    each tensor to 1e-4 relative (max |hetc - torch| / max |torch|), with
    transposed initializers and the re-tied GPT-2 head mapped through the
    reference's onnx_params / tied lists;
  - 10 AdamW steps (lr, betas, eps, weight decay on rank >= 2, clip 1.0 from
    hparams): loss and pre-clip grad norm trajectories to 1e-4 relative;
  - --export: onnxruntime on the trained ONNX reproduces hetc's logits for
    the same weights (hetc run on the export), and they differ from the
    untrained model's;
  - the final checkpoint's MANIFEST checksums (FNV-1a 64) match its files,
    and its weights are the exported initializers.

    test_train_ref.py HETC SOURCE_DIR
"""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

HETC, SRC = sys.argv[1], sys.argv[2]
RTOL = 1e-4
fails = []
counts = {"runs": 0, "grads": 0}
worst = {"grad": 0.0, "loss": 0.0, "traj": 0.0, "export": 0.0}


def fnv1a(b):
    h = 14695981039346656037
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def safe(n):
    return n.replace("/", "_").replace(":", "_")


def check_model(model, refname, accum=1, passes=None):
    ref = np.load(os.path.join(SRC, "tests/models", refname))
    hp = json.loads(str(ref["hparams"]))
    onnx_path = os.path.join(SRC, "tests/models", model)
    names = hp["onnx_params"][model]
    tied = {b for a, b in hp["tied"]}
    tmp = tempfile.mkdtemp(prefix="hetc_train_")
    atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends
    gd, ck, ex = (os.path.join(tmp, d) for d in ("grads", "ckpt", "trained.onnx"))
    cmd = [HETC, "train", onnx_path, "--precision", "fp32", "--data", os.path.join(SRC, hp["data"]),
           "--steps", str(hp["steps"]), "--microbatch", str(hp["batch"] // accum),
           "--accum", str(accum), "--seq", str(hp["seq"]),
           "--optimizer", "adamw", "--lr", repr(hp["lr"]), "--beta1", repr(hp["betas"][0]),
           "--beta2", repr(hp["betas"][1]), "--adam-eps", repr(hp["eps"]),
           "--weight-decay", repr(hp["weight_decay"]), "--clip", repr(hp["clip"]),
           "--lr-schedule", hp["lr_schedule"], "--dump-grads", gd, "--checkpoint-dir", ck,
           "--export", ex] + (["--passes", passes] if passes else [])
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if r.returncode:
        fails.append("%s: hetc train failed: %s" % (model, r.stderr[-2000:]))
        return
    counts["runs"] += 1
    # batch 0: loss and every gradient
    e = rel(np.load(os.path.join(gd, "loss.npy")), ref["loss"])
    worst["loss"] = max(worst["loss"], e)
    if e > RTOL:
        fails.append("%s: loss off by %.2e" % (model, e))
    seen = set()
    for oname, (tname, transposed) in names.items():
        path = os.path.join(gd, "grad_%s.npy" % safe(oname))
        if tname in tied:  # the exporter's untied copy: re-tied, no gradient of its own
            if os.path.exists(path):
                fails.append("%s: tied copy %s was trained separately" % (model, oname))
            continue
        if not os.path.exists(path):
            fails.append("%s: no gradient for %s (%s)" % (model, oname, tname))
            continue
        g = np.load(path)
        g = g.T if transposed else g
        e = rel(g, ref["grad/" + tname])
        worst["grad"] = max(worst["grad"], e)
        seen.add(tname)
        counts["grads"] += 1
        if e > RTOL:
            fails.append("%s: grad of %s off by %.2e" % (model, tname, e))
    want = {k[5:] for k in ref.files if k.startswith("grad/")}
    if seen != want:
        fails.append("%s: parameters compared %s != reference %s" % (model, sorted(seen),
                                                                     sorted(want)))
    # 10-step trajectory
    steps = re.findall(r"loss ([0-9.eE+-]+) \| grad norm ([0-9.eE+-]+) \| lr ([0-9.eE+-]+)",
                       r.stdout)
    if len(steps) != hp["steps"]:
        fails.append("%s: %d step lines, expected %d" % (model, len(steps), hp["steps"]))
        return
    got = np.array(steps, np.float64)
    for col, key in ((0, "traj_loss"), (1, "traj_grad_norm"), (2, "traj_lr")):
        e = float(np.max(np.abs(got[:, col] - ref[key]) / np.abs(ref[key])))
        worst["traj"] = max(worst["traj"], e)
        if e > RTOL:
            fails.append("%s: %s off by %.2e: %s vs %s" % (model, key, e, got[:, col], ref[key]))
    if accum > 1 or passes:
        return  # the export and checkpoint do not depend on how the batch was split
    # export: onnxruntime vs hetc on the trained weights
    x = ref["inputs"][0].astype(np.int64)
    xin = os.path.join(tmp, "x.npy")
    np.save(xin, x)
    od = os.path.join(tmp, "run")
    r2 = subprocess.run([HETC, "run", ex, "--input", "input_ids=" + xin, "--output-dir", od],
                        capture_output=True, text=True)
    if r2.returncode:
        fails.append("%s: hetc run on the export failed: %s" % (model, r2.stderr[-1000:]))
        return
    mine = np.load(os.path.join(od, "logits.npy"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = ort.InferenceSession(ex, so).run(None, {"input_ids": x})[0]
    before = ort.InferenceSession(onnx_path, so).run(None, {"input_ids": x})[0]
    e = rel(mine, theirs)
    worst["export"] = max(worst["export"], e)
    if e > RTOL:
        fails.append("%s: exported model: hetc vs onnxruntime logits off by %.2e" % (model, e))
    if rel(before, theirs) < 1e-3:
        fails.append("%s: exported logits equal the untrained model's" % model)
    # checkpoint: checksums, and the weights are the exported ones
    # (the run's metrics.jsonl and loss.svg live beside the step directories)
    steps_dirs = sorted(x for x in os.listdir(ck) if x not in ("metrics.jsonl", "loss.svg"))
    if steps_dirs != ["step-%06d" % hp["steps"]]:
        fails.append("%s: checkpoint dirs %s" % (model, steps_dirs))
        return
    cd = os.path.join(ck, steps_dirs[0])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(ex).graph.initializer}
    for line in open(os.path.join(cd, "MANIFEST")):
        parts = line.split()
        if parts[0] == "step":
            continue
        fname, pname, kind, n, h = parts
        b = open(os.path.join(cd, fname), "rb").read()
        if len(b) != 4 * int(n) or fnv1a(b) != int(h, 16):
            fails.append("%s: checkpoint file %s: size or checksum mismatch" % (model, fname))
        if kind == "param" and not np.array_equal(np.frombuffer(b, np.float32),
                                                  inits[pname].reshape(-1)):
            fails.append("%s: checkpoint %s differs from the exported initializer" % (model, pname))


for model, refname in (("gpt2_op17.onnx", "gpt2.train_ref.npz"),
                       ("gpt2_op14.onnx", "gpt2.train_ref.npz"),
                       ("llama_op17.onnx", "llama.train_ref.npz"),
                       ("llama_op14.onnx", "llama.train_ref.npz")):
    check_model(model, refname)
# gradient accumulation: 2 microbatches of B/2 rows are step k's B rows in
# llm.c's layout, so the torch trajectory of the full batch is the oracle
check_model("gpt2_op17.onnx", "gpt2.train_ref.npz", accum=2)
check_model("llama_op17.onnx", "llama.train_ref.npz", accum=2)
# without canonicalize: the exporters' primitive ops (LayerNorm as ReduceMean/Sub/
# Pow/Sqrt/Div, tanh-Gelu, attention as MatMul/Softmax/Where, rotary Slice/Neg/
# Concat, Gather embeddings, ...) differentiated rule by rule
for model, refname in (("gpt2_op17.onnx", "gpt2.train_ref.npz"),
                       ("llama_op17.onnx", "llama.train_ref.npz")):
    check_model(model, refname, passes="shape-infer,const-fold,shape-infer,dce")
print("%d training runs, %d parameter gradients compared" % (counts["runs"], counts["grads"]))
print("max rel err vs torch: loss %.2e, gradients %.2e, 10-step trajectory %.2e; "
      "export hetc vs onnxruntime %.2e" % (worst["loss"], worst["grad"], worst["traj"],
                                           worst["export"]))
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
