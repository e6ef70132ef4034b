"""Extra graph inputs (optimum's signature: input_ids, attention_mask,
position_ids) bound to constants for training on token files
(driver/input_binds.c, docs/TRAINING.md "Extra graph inputs").

A small model built here with onnx.helper takes the three inputs: token and
position embeddings (Gather of position_ids), one attention over the rows
whose scores get a padding bias from attention_mask, and a head.  The
oracle is onnxruntime on the same model with the first microbatch of the
tiny corpus and the tensors the binding promises (ones, 0..T-1, or the
given file), and numpy's cross-entropy of its logits:

  - hetc train's first-step loss (--dump-grads) with the default binding,
    with --bind-input position_ids=zeros and with attention_mask=FILE.npy
    (a mask with zeros, so the mask path matters), to 1e-5 relative;
  - one log line per bound input (name, what it got); the import dump
    shows the inputs as constants (not inputs);
  - hetc plan on the model plans, saying what it bound; hetc compile builds
    one stage whose binary trains 3 steps with hetc train's losses (1e-5);
  - an unknown extra input is an error naming it and --bind-input, and
    binding it lets training run; bad --bind-input specs are errors naming
    what was wrong.

    test_input_binds.py HETC SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402
from sanenv import compiler_env  # noqa: E402

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HETC, SRC = sys.argv[1], sys.argv[2]
DATA = os.path.abspath(os.path.join(SRC, "examples", "tiny_corpus.bin"))
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
B, T, V, D, P = 2, 16, 128, 16, 32
RTOL = 1e-5
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(*args, timeout=600):
    """hetc args; train / plan / compile at --precision fp32 unless args name
    one (tests/hetc_cmd.py: the checks are onnxruntime's fp32 to 1e-5)"""
    p = subprocess.run(pinned([HETC, *args]), capture_output=True, text=True, timeout=timeout,
                       env=dict(compiler_env(), OPENBLAS_NUM_THREADS="1"))
    return p.returncode, p.stdout, p.stderr


def model(path, extra_input=None):
    """input_ids, attention_mask, position_ids [batch, seq] -> logits."""
    rng = np.random.default_rng(7)
    init = [numpy_helper.from_array((rng.standard_normal(s) * 0.5).astype(np.float32), n)
            for n, s in (("wte", (V, D)), ("wpe", (P, D)), ("head", (D, V)))]
    init += [numpy_helper.from_array(np.array(x, np.float32), n) for n, x in
             (("one", 1.0), ("neg", -1e4), ("scale", D ** -0.5))]
    init.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    N = helper.make_node
    nodes = [
        N("Gather", ["wte", "input_ids"], ["tok"]),
        N("Gather", ["wpe", "position_ids"], ["pos"]),
        N("Add", ["tok", "pos"], ["h"]),
        N("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        N("Sub", ["one", "maskf"], ["inv"]),
        N("Mul", ["inv", "neg"], ["bias"]),
        N("Unsqueeze", ["bias", "ax1"], ["bias3"]),
        N("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
        N("MatMul", ["h", "ht"], ["s0"]),
        N("Mul", ["s0", "scale"], ["s1"]),
        N("Add", ["s1", "bias3"], ["s2"]),
        N("Softmax", ["s2"], ["p"], axis=-1),
        N("MatMul", ["p", "h"], ["att"]),
        N("Add", ["h", "att"], ["h2"]),
    ]
    if extra_input:  # used, so the model needs it fed
        nodes.append(N("Cast", [extra_input], ["xf"], to=TensorProto.FLOAT))
        nodes.append(N("Unsqueeze", ["xf", "ax2"], ["xf3"]))
        nodes.append(N("Add", ["h2", "xf3"], ["h3"]))
        init.append(numpy_helper.from_array(np.array([2], np.int64), "ax2"))
    nodes.append(N("MatMul", ["h3" if extra_input else "h2", "head"], ["logits"]))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
           for n in ["input_ids", "attention_mask", "position_ids"] + (
               [extra_input] if extra_input else [])]
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", V])
    g = helper.make_graph(nodes, "maskinputs", ins, [out], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def first_batch():
    tok = np.fromfile(DATA, dtype=np.uint16, offset=1024)[:B * T + 1].astype(np.int64)
    return tok[:-1].reshape(B, T), tok[1:].reshape(B, T)


def oracle_loss(path, feeds):
    x, y = first_batch()
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = sess.run(None, dict(feeds, input_ids=x))[0].astype(np.float64)
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[..., 0]
    return float(np.mean(lse - np.take_along_axis(logits, y[..., None], -1)[..., 0]))


def train(path, d, *extra, steps=1):
    gd = os.path.join(d, "grads")
    rc, out, err = run("train", path, "--data", DATA, "--steps", str(steps), "--microbatch",
                       str(B), "--seq", str(T), "--no-checkpoint", "--dump-grads", gd, *extra)
    loss = float(np.load(os.path.join(gd, "loss.npy"))) if rc == 0 else None
    return rc, out, err, loss


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


with tempfile.TemporaryDirectory() as d:
    m3 = os.path.join(d, "mask3.onnx")
    model(m3)
    ones = np.ones((B, T), np.int64)
    arange = np.tile(np.arange(T, dtype=np.int64), (B, 1))

    # default binding: ones, 0..T-1
    rc, out, err, loss = train(m3, d, "--dump-ir-after=import", "-o", d)
    ref = oracle_loss(m3, {"attention_mask": ones, "position_ids": arange})
    if check(rc == 0, "train binds attention_mask / position_ids by name: " + err[-400:]):
        check(rel(loss, ref) < RTOL, f"default binding: loss {loss} vs onnxruntime {ref}")
        lines = [l for l in out.splitlines() if l.startswith("hetc: input ")]
        check(len(lines) == 2 and "attention_mask" in lines[0] and "ones" in lines[0]
              and "position_ids" in lines[1] and "arange" in lines[1],
              f"one log line per bound input: {lines}")
        ir = open(os.path.join(d, "ir", "00-import.ir")).read()
        decl = [l for l in ir.splitlines() if re.search(r"\b(attention_mask|position_ids)\b", l)
                and re.search(r"\b(input|const)\b", l)]
        check(decl and all("input" not in re.sub(r"\S*(attention_mask|position_ids)\S*", "", l)
                           for l in decl) and any("const" in l for l in decl),
              f"the import dump holds them as constants: {decl[:2]}")
    ref_ones = ref

    # override: position_ids=zeros
    rc, out, err, loss = train(m3, d, "--bind-input", "position_ids=zeros")
    ref = oracle_loss(m3, {"attention_mask": ones, "position_ids": np.zeros((B, T), np.int64)})
    if check(rc == 0, "--bind-input position_ids=zeros: " + err[-400:]):
        check(rel(loss, ref) < RTOL and rel(ref, ref_ones) > 1e-3,
              f"position_ids=zeros: loss {loss} vs onnxruntime {ref} (default {ref_ones})")
        check(any("position_ids" in l and "zeros" in l and "--bind-input" in l
                  for l in out.splitlines()), "the log says the override")

    # override: attention_mask from a file with zeros (padding the second half of row 1)
    mask = ones.copy()
    mask[1, T // 2:] = 0
    mpath = os.path.join(d, "mask.npy")
    np.save(mpath, mask)
    rc, out, err, loss = train(m3, d, "--bind-input=attention_mask=" + mpath)
    ref = oracle_loss(m3, {"attention_mask": mask, "position_ids": arange})
    if check(rc == 0, "--bind-input attention_mask=FILE.npy: " + err[-400:]):
        check(rel(loss, ref) < RTOL and rel(ref, ref_ones) > 1e-4,
              f"attention_mask=FILE: loss {loss} vs onnxruntime {ref} (ones {ref_ones})")
        check(any("attention_mask" in l and mpath in l for l in out.splitlines()),
              "the log names the file")

    # errors
    bad = os.path.join(d, "bad.npy")
    np.save(bad, np.ones((B, T + 1), np.int64))
    rc, out, err, _ = train(m3, d, "--bind-input", "attention_mask=" + bad)
    check(rc != 0 and "attention_mask" in err and "[2,17]" in err and "[2,16]" in err,
          f"a file of the wrong shape is named with both shapes: {err.strip()}")
    rc, out, err, _ = train(m3, d, "--bind-input", "attention_mask=twos")
    check(rc == 2 and "twos" in err and "ones, zeros, arange" in err,
          f"unknown binding named: {err.strip()}")
    rc, out, err, _ = train(m3, d, "--bind-input", "nosuch=ones")
    check(rc != 0 and "nosuch" in err and "attention_mask" in err and "input_ids" in err,
          f"--bind-input of no input lists the inputs: {err.strip()}")
    rc, out, err, _ = train(m3, d, "--bind-input", "attention_mask")
    check(rc == 2 and "NAME=" in err, f"--bind-input without '=': {err.strip()}")

    # an unknown extra input
    m4 = os.path.join(d, "mask4.onnx")
    model(m4, extra_input="segment_ids")
    rc, out, err, _ = train(m4, d)
    check(rc != 0 and "'segment_ids'" in err and "--bind-input segment_ids=" in err,
          f"unknown extra input: error names it and the option: {err.strip()}")
    rc, out, err, loss = train(m4, d, "--bind-input", "segment_ids=zeros")
    ref = oracle_loss(m4, {"attention_mask": ones, "position_ids": arange,
                           "segment_ids": np.zeros((B, T), np.int64)})
    check(rc == 0 and rel(loss, ref) < RTOL,
          f"segment_ids=zeros: loss {loss} vs onnxruntime {ref}: {err[-300:]}")

    # hetc run still takes the inputs as inputs, and binds only what it is told
    x, _ = first_batch()
    xp = os.path.join(d, "x.npy")
    np.save(xp, x)
    rc, out, err = run("run", m3, "--input", "input_ids=" + xp, "--bind-input",
                       "attention_mask=ones", "--bind-input", "position_ids=arange",
                       "--output-dir", os.path.join(d, "run"))
    if check(rc == 0, "hetc run with --bind-input: " + err[-300:]):
        sess = ort.InferenceSession(m3, providers=["CPUExecutionProvider"])
        want = sess.run(None, {"input_ids": x, "attention_mask": ones, "position_ids": arange})[0]
        got = np.load(os.path.join(d, "run", "logits.npy"))
        e = float(np.abs(got - want).max() / np.abs(want).max())
        check(e < RTOL, f"hetc run --bind-input logits vs onnxruntime: {e:.2e}")

    # hetc plan and hetc compile: the same binding
    cluster = os.path.join(SRC, "examples", "clusters", "tiny_pair.yaml")
    rc, out, err = run("plan", m3, cluster, "--seq", str(T), "--microbatch", str(B),
                       "--global-batch", str(2 * B), "--threads", "2", "-o", os.path.join(d, "p"))
    check(rc == 0 and "attention_mask" in err and "position_ids" in err,
          f"hetc plan binds and says so: {err[-400:]}")
    cdir = os.path.join(d, "c")
    one = os.path.join(d, "one.yaml")  # one device: one stage, one rank
    with open(one, "w") as f:
        f.write("name: one\ndtype: fp32\nmeshes:\n  - {name: a, device: A100-80GB, nodes: 1, "
                "devices_per_node: 1}\n")
    opt = ["--lr", "3e-3", "--lr-schedule", "constant"]
    rc, out, err = run(m3, one, "--seq", str(T), "--microbatch", str(B), "--global-batch",
                       str(2 * B), "--threads", "2", "--steps", "3", *opt, "-o", cdir)
    if check(rc == 0, "hetc compile of the mask-inputs model: " + err[-600:]):
        p = subprocess.run([os.path.join(cdir, "launch.sh"), "--data", DATA, "--steps", "3"],
                           capture_output=True, text=True, timeout=600, cwd=d, env=MPI_ENV)
        rc2, tout, terr = run("train", m3, "--data", DATA, "--steps", "3", "--microbatch", str(B),
                              "--accum", "2", "--seq", str(T), "--no-checkpoint", *opt)
        pat = r"^step\s+(\d+)/\d+ \| loss (\S+)"
        got = {int(a): float(b) for a, b in re.findall(pat, p.stdout, re.M)}
        want = {int(a): float(b) for a, b in re.findall(pat, tout, re.M)}
        e = max((rel(got.get(k, np.nan), v) for k, v in want.items()), default=1.0)
        check(p.returncode == 0 and rc2 == 0 and len(want) == 3 and e < RTOL,
              f"stage binary losses {got} vs hetc train {want} ({e:.1e}): {p.stderr[-400:]}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
