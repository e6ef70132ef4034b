"""hetc train --engine compiled (issue 15 item 4): hetc compiles the model
into a one-stage program for this host and runs it, so the single-process
run is the stage binaries' own code.  Checked against PyTorch and against
the executor engine, on the test models (tests/models):

  - fp32, the torch trajectories of tests/models/{gpt2,llama}.train_ref.npz
    (the models' own torch code in float64, 10 AdamW steps): loss, pre-clip
    gradient norm and lr of every step to 1e-4 relative -- gpt2_op17 and
    llama_op17; gpt2 with --accum 2 (two microbatches of half the rows make
    step k's rows); gpt2 with --passes (the exporters' primitive ops:
    hetc train's import options reach the compile);
  - --export (weights that arrive through the program's checkpoint, not
    the executor's memory): onnxruntime computes the executor engine's
    export's logits to 1e-4, onnxruntime and hetc run agree on it, and its
    logits differ from the untrained model's;
  - bf16-mixed: 20 steps against torch.autocast(bfloat16) with fp32 master
    weights (tests/models/gpt2.bf16_ref.npz): mean relative error < 1.5 %,
    every step < 3 %, and within 1e-3 of the executor engine's bf16 run;
  - SGD with momentum, a cosine schedule with warm-up, clip 0.5, --accum 2
    and --loss xent:ignore=0 on gpt_tiny, fp32: every step's loss, grad
    norm and lr within 1e-5 of the executor engine;
  - --val-data: the validation losses within 1e-5 of the executor's;
  - --resume: a run continued from its step-3 checkpoint prints steps 4-6
    exactly as the uninterrupted run; a second run into the same
    --checkpoint-dir is refused and --overwrite-checkpoints starts afresh;
    --resume from the executor engine's checkpoints is refused (the program
    would have started afresh), naming --engine executor;
  - --program-dir keeps the program (its stage_0 answers --build-id);
    without it and with --no-checkpoint nothing is left behind: no scratch
    directory under TMPDIR, no checkpoint directory;
  - hetc train without --engine runs the compiled program; --dump-grads
    without --engine runs the executor (and says so);
  - refusals: --dump-grads / --exec-stats with --engine compiled,
    --program-dir with the executor, an unknown --engine (exit 2); a model
    file that is not ONNX and a token file with an id past the vocabulary
    near its end (exit 1, the file named, nothing compiled, no scratch left).

    test_train_compiled.py HETC SOURCE_DIR
"""
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
TMP = tempfile.mkdtemp(prefix="hetc_train_compiled_")
SCRATCH = os.path.join(TMP, "tmpdir")  # TMPDIR of every hetc train below
os.makedirs(SCRATCH)
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", TMPDIR=SCRATCH)
TINY = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
fails = []
worst = {}


def check(ok, msg):
    if not ok:
        fails.append(msg)
    return ok


def note(key, e):
    worst[key] = max(worst.get(key, 0.0), e)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def train(*args, engine="compiled", cwd=None):
    cmd = [HETC, "train", *args, "--engine", engine]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=900)
    print("$", " ".join(cmd), "->", r.returncode, flush=True)
    return r


def steps_of(out):
    """(loss, grad norm, lr) of every step line, in order."""
    return np.array(re.findall(r"loss ([0-9.eE+-]+) \| grad norm ([0-9.eE+-]+) \| "
                               r"lr ([0-9.eE+-]+)", out), np.float64).reshape(-1, 3)


def step_lines(out):
    return [ln for ln in out.splitlines() if ln.startswith("step ") and "| loss " in ln]


def no_scratch(what):
    left = os.listdir(SCRATCH)
    check(not left, f"{what}: scratch left under TMPDIR: {left}")


def hp_args(hp, batch=None, accum=1):
    return ["--data", os.path.join(SRC, hp["data"]), "--steps", str(hp["steps"]),
            "--microbatch", str((batch or hp["batch"]) // accum), "--accum", str(accum),
            "--seq", str(hp["seq"]), "--optimizer", "adamw", "--lr", repr(hp["lr"]),
            "--beta1", repr(hp["betas"][0]), "--beta2", repr(hp["betas"][1]),
            "--adam-eps", repr(hp["eps"]), "--weight-decay", repr(hp["weight_decay"]),
            "--clip", repr(hp["clip"]), "--lr-schedule", hp["lr_schedule"]]


def vs_torch(model, refname, accum=1, passes=None, export=False):
    """10 fp32 steps of the compiled engine against the torch trajectory."""
    ref = np.load(os.path.join(SRC, "tests/models", refname))
    hp = json.loads(str(ref["hparams"]))
    path = os.path.join(SRC, "tests/models", model)
    tag = f"{model} accum {accum}" + (f" --passes {passes}" if passes else "")
    d = tempfile.mkdtemp(dir=TMP)
    extra = ["--passes", passes] if passes else []
    ex = os.path.join(d, "trained.onnx")
    r = train(path, "--precision", "fp32", *hp_args(hp, accum=accum), *extra,
              "--checkpoint-dir", os.path.join(d, "ck"), *(["--export", ex] if export else []))
    if not check(r.returncode == 0, f"{tag}: hetc train --engine compiled failed: "
                 f"{r.stderr[-2000:]}"):
        return
    check("one-stage program" in r.stdout, f"{tag}: no line saying the program was compiled")
    got = steps_of(r.stdout)
    if not check(len(got) == hp["steps"], f"{tag}: {len(got)} step lines, want {hp['steps']}"):
        return
    for col, key in ((0, "traj_loss"), (1, "traj_grad_norm"), (2, "traj_lr")):
        e = float(np.max(np.abs(got[:, col] - ref[key]) / np.abs(ref[key])))
        note("torch", e)
        check(e <= 1e-4, f"{tag}: {key} off torch's by {e:.2e}: {got[:, col]} vs {ref[key]}")
    no_scratch(tag)
    if not export:
        return
    # the executor engine's export of the same run: the same weights to fp32 noise
    ex2 = os.path.join(d, "trained_executor.onnx")
    r2 = train(path, "--precision", "fp32", *hp_args(hp), "--checkpoint-dir",
               os.path.join(d, "ck2"), "--export", ex2, engine="executor")
    if not check(r2.returncode == 0 and os.path.exists(ex), f"{tag}: executor run / export "
                 f"missing: {r2.stderr[-800:]}"):
        return
    a = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(ex).graph.initializer}
    b = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(ex2).graph.initializer}
    u = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    check(sorted(a) == sorted(b), f"{tag}: the exports' initializers differ in names")
    moved = sum(int(k in u and a[k].dtype == np.float32 and not np.array_equal(a[k], u[k]))
                for k in a)
    check(moved >= 10, f"{tag}: only {moved} exported initializers differ from the model's")
    x = ref["inputs"][0].astype(np.int64)
    xin = os.path.join(d, "x.npy")
    np.save(xin, x)
    od = os.path.join(d, "run")
    r3 = subprocess.run([HETC, "run", ex, "--input", "input_ids=" + xin, "--output-dir", od],
                        capture_output=True, text=True)
    if check(r3.returncode == 0, f"{tag}: hetc run on the export: {r3.stderr[-800:]}"):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        theirs = ort.InferenceSession(ex, so).run(None, {"input_ids": x})[0]
        before = ort.InferenceSession(path, so).run(None, {"input_ids": x})[0]
        e = rel(np.load(os.path.join(od, "logits.npy")), theirs)
        note("export_ort", e)
        check(e <= 1e-4, f"{tag}: export: hetc vs onnxruntime logits off by {e:.2e}")
        check(rel(before, theirs) > 1e-3, f"{tag}: exported logits equal the untrained model's")
        # the same function as the executor engine's export: compared as logits, since
        # GPT-2's key bias has a zero gradient (softmax ignores a per-row shift), so AdamW
        # walks it by +-lr per step on the sign of fp32 noise in either engine
        exe = ort.InferenceSession(ex2, so).run(None, {"input_ids": x})[0]
        e = rel(theirs, exe)
        note("export_vs_executor", e)
        check(e <= 1e-4, f"{tag}: exported model's logits off the executor export's by {e:.2e}")


# ---- fp32 against torch (and --export through the program's checkpoint)
vs_torch("gpt2_op17.onnx", "gpt2.train_ref.npz", export=True)
vs_torch("llama_op17.onnx", "llama.train_ref.npz")
vs_torch("gpt2_op17.onnx", "gpt2.train_ref.npz", accum=2)
vs_torch("gpt2_op17.onnx", "gpt2.train_ref.npz", passes="shape-infer,const-fold,shape-infer,dce")

# ---- bf16-mixed against torch.autocast and the executor
ref = np.load(os.path.join(SRC, "tests/models/gpt2.bf16_ref.npz"))
hp = json.loads(str(ref["hparams"]))
gpt2 = os.path.join(SRC, "tests/models/gpt2_op17.onnx")
runs = {}
for engine in ("compiled", "executor"):
    r = train(gpt2, "--precision", "bf16-mixed", *hp_args(hp), "--no-checkpoint", engine=engine)
    if check(r.returncode == 0, f"bf16 {engine}: {r.stderr[-1500:]}"):
        runs[engine] = steps_of(r.stdout)[:, 0]
if check(len(runs.get("compiled", [])) == hp["steps"], "bf16 compiled: step lines missing"):
    e = np.abs(runs["compiled"] - ref["traj_loss"]) / np.abs(ref["traj_loss"])
    note("autocast_mean", float(e.mean()))
    note("autocast_step", float(e.max()))
    check(e.mean() < 0.015 and e.max() < 0.03,
          f"bf16 compiled vs autocast: mean {e.mean():.2e} max {e.max():.2e}")
    if check(len(runs.get("executor", [])) == hp["steps"], "bf16 executor: step lines missing"):
        e = rel(runs["compiled"], runs["executor"])
        note("bf16_vs_executor", e)
        check(e <= 1e-3, f"bf16: compiled vs executor losses off by {e:.2e}")
no_scratch("bf16 runs with --no-checkpoint")
check(not os.path.exists("checkpoint"), "--no-checkpoint wrote ./checkpoint")

# ---- every other training option against the executor (fp32)
opts = ["--data", DATA, "--steps", "8", "--seq", "32", "--microbatch", "2", "--accum", "2",
        "--precision", "fp32", "--optimizer", "sgd", "--momentum", "0.8", "--lr", "0.05",
        "--lr-schedule", "cosine", "--warmup", "3", "--clip", "0.5", "--weight-decay", "0.01",
        "--loss", "xent:ignore=0", "--val-data", DATA, "--val-every", "4", "--val-batches", "3"]
outs = {}
for engine in ("compiled", "executor"):
    d = tempfile.mkdtemp(dir=TMP)
    r = train(TINY, *opts, "--checkpoint-dir", os.path.join(d, "ck"), engine=engine)
    if check(r.returncode == 0, f"sgd/cosine {engine}: {r.stderr[-1500:]}"):
        outs[engine] = r.stdout
if len(outs) == 2:
    a, b = steps_of(outs["compiled"]), steps_of(outs["executor"])
    if check(a.shape == b.shape == (8, 3), f"sgd/cosine: step lines {a.shape} / {b.shape}"):
        e = max(rel(a[:, k], b[:, k]) for k in range(3))
        note("options_vs_executor", e)
        check(e <= 1e-5, f"sgd/cosine/accum/ignore: compiled vs executor off by {e:.2e}")
        check(len(set(a[:, 2])) > 3, f"the cosine schedule did not move the lr: {a[:, 2]}")
    va = [float(x) for x in re.findall(r"val loss ([0-9.eE+-]+)", outs["compiled"])]
    vb = [float(x) for x in re.findall(r"val loss ([0-9.eE+-]+)", outs["executor"])]
    if check(len(va) == len(vb) == 2, f"validation lines: {va} / {vb}"):
        e = rel(va, vb)
        note("val_vs_executor", e)
        check(e <= 1e-5, f"validation loss: compiled {va} vs executor {vb}")

# ---- resume, a used checkpoint directory, --program-dir
d = tempfile.mkdtemp(dir=TMP)
base = ["--data", DATA, "--steps", "6", "--seq", "32", "--microbatch", "2", "--precision", "fp32"]
ck = os.path.join(d, "ck")
full = train(TINY, *base, "--checkpoint-dir", ck, "--checkpoint-every", "3")
if check(full.returncode == 0, f"resume: the uninterrupted run failed: {full.stderr[-1500:]}"):
    ck2 = os.path.join(d, "ck2")
    shutil.copytree(ck, ck2)
    shutil.rmtree(os.path.join(ck2, "step_00000006"))
    os.remove(os.path.join(ck2, "LOCK")) if os.path.exists(os.path.join(ck2, "LOCK")) else None
    res = train(TINY, *base, "--checkpoint-dir", ck2, "--resume")
    if check(res.returncode == 0, f"resume failed: {res.stderr[-1500:]}"):
        want = [re.sub(r"\| [0-9]+ tok/s.*", "", x) for x in step_lines(full.stdout)[3:]]
        got = [re.sub(r"\| [0-9]+ tok/s.*", "", x) for x in step_lines(res.stdout)]
        check(len(want) == 3 and got == want, f"resumed steps 4-6:\n{got}\nwant\n{want}")
    again = train(TINY, *base, "--checkpoint-dir", ck)
    check(again.returncode != 0 and "already holds checkpoints" in again.stderr,
          f"a second run into a used --checkpoint-dir: {again.returncode} {again.stderr[-600:]}")
    pd = os.path.join(d, "program")
    over = train(TINY, *base, "--checkpoint-dir", ck, "--overwrite-checkpoints",
                 "--program-dir", pd)
    check(over.returncode == 0 and step_lines(over.stdout) and
          [re.sub(r"\| [0-9]+ tok/s.*", "", x) for x in step_lines(over.stdout)] ==
          [re.sub(r"\| [0-9]+ tok/s.*", "", x) for x in step_lines(full.stdout)],
          f"--overwrite-checkpoints: {over.returncode} {over.stderr[-600:]}")
    stage0 = os.path.join(pd, "stage_0")
    if check(os.access(stage0, os.X_OK), "--program-dir: no stage_0 kept"):
        b = subprocess.run([stage0, "--build-id"], capture_output=True, text=True)
        check(b.returncode == 0 and re.search(r"[0-9a-f]{16}", b.stdout),
              f"the kept stage_0 --build-id: {b.returncode} {b.stdout!r} {b.stderr[-300:]}")
# the executor's checkpoints are not resumed by the compiled program (which would
# start afresh from the initial weights): refused, naming the engine that wrote them
ex = os.path.join(d, "ck_executor")
r = train(TINY, *base, "--checkpoint-dir", ex, engine="executor")
if check(r.returncode == 0, f"executor run for the resume refusal: {r.stderr[-400:]}"):
    r = train(TINY, *base, "--checkpoint-dir", ex, "--resume")
    check(r.returncode == 1 and "--engine executor" in r.stderr and "step-000006" in r.stderr
          and "one-stage program" not in r.stdout,
          f"--resume from the executor's checkpoints: {r.returncode} {r.stderr[-500:]}")
no_scratch("resume / --program-dir")

# ---- refusals
d = tempfile.mkdtemp(dir=TMP)
for args, engine, want in (
        (["--dump-grads", os.path.join(d, "g")], "compiled", "needs the executor"),
        (["--exec-stats"], "compiled", "needs the executor"),
        (["--program-dir", os.path.join(d, "p")], "executor", "belongs to --engine compiled")):
    r = train(TINY, "--data", DATA, "--steps", "2", "--no-checkpoint", *args, engine=engine)
    check(r.returncode == 2 and want in r.stderr, f"{args} {engine}: want exit 2 saying "
          f"'{want}', got {r.returncode} {r.stderr[-400:]}")
r = subprocess.run([HETC, "train", TINY, "--data", DATA, "--steps", "2", "--engine", "jit"],
                   capture_output=True, text=True, env=ENV)
check(r.returncode == 2 and "--engine must be executor or compiled" in r.stderr,
      f"--engine jit: {r.returncode} {r.stderr[-300:]}")
# the default engine is the compiled one; --dump-grads without --engine picks the executor
r = subprocess.run([HETC, "train", TINY, "--data", DATA, "--steps", "2", "--seq", "32",
                    "--no-checkpoint"], capture_output=True, text=True, env=ENV)
check(r.returncode == 0 and "one-stage program" in r.stdout and "hetrt stage 0 of 1" in r.stdout,
      f"hetc train without --engine: not the compiled program: {r.returncode} {r.stdout[-600:]}")
r = subprocess.run([HETC, "train", TINY, "--data", DATA, "--steps", "2", "--seq", "32",
                    "--no-checkpoint", "--dump-grads", os.path.join(d, "g")],
                   capture_output=True, text=True, env=ENV)
check(r.returncode == 0 and "running the executor engine" in r.stdout and
      os.path.exists(os.path.join(d, "g", "loss.npy")),
      f"--dump-grads without --engine: {r.returncode} {r.stdout[-600:]} {r.stderr[-400:]}")
bad = os.path.join(d, "bad.onnx")
with open(bad, "wb") as f:
    f.write(b"this is not a protobuf\xff\xff\xff")
r = train(bad, "--data", DATA, "--steps", "2", "--no-checkpoint")
check(r.returncode == 1 and "bad.onnx" in r.stderr and "not a valid ONNX" in r.stderr and
      "one-stage program" not in r.stdout, f"a broken model: {r.returncode} {r.stderr[-600:]}")
# a token id past the vocabulary late in the file: refused before anything is compiled
# (the program itself checks only the batches it reads)
late = os.path.join(d, "late.bin")
with open(DATA, "rb") as f:
    blob = bytearray(f.read())
blob[-2:] = (60000).to_bytes(2, "little")
with open(late, "wb") as f:
    f.write(blob)
r = train(TINY, "--data", late, "--steps", "2", "--no-checkpoint")
check(r.returncode == 1 and "late.bin" in r.stderr and "one-stage program" not in r.stdout,
      f"a late token id past the vocabulary: {r.returncode} {r.stderr[-600:]}")
no_scratch("the refusals")

print("max relative differences: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
for f in fails:
    print("FAIL", f)
print(f"{len(fails)} failures")
shutil.rmtree(TMP, ignore_errors=True) if not fails else None
sys.exit(1 if fails else 0)
