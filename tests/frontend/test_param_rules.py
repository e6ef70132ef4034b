"""The importer's parameter-set rules (frontend/param_kinds.c, param_untie.c)
on small onnx.helper models, through `hetc import --list-params`, and the
untied copies through `hetc train --export` (onnxruntime is the oracle: the
exported model must compute what the original computes with the trained
weights, and hold one initializer per trained parameter).

    test_param_rules.py HETC WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

V, D, B, T = 16, 8, 2, 4
rng = np.random.default_rng(0)
fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def init(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def model(nodes, inits, path, out="logits", oshape=(B, T, V)):
    g = helper.make_graph(nodes, "m",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", "seq", oshape[2]])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return m


def listing(hetc, path, work, *extra):
    p = subprocess.run([hetc, "import", path, "--batch", str(B), "--seq", str(T),
                        "--list-params", work, *extra], capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr
    rows = [l.split() for l in open(os.path.join(work, "params.txt"))]
    return {r[1]: r for r in rows}, p.stderr


def dedup_model(path, identity):
    """emb -> LN(w, b) -> MatMul W1 -> LN(w, b) -> MatMul head; w (ones) and b
    (zeros) shared by both norms as an exporter dedups them: read directly
    (dynamo) or through an Identity (TorchScript)."""
    inits = [init("emb", rng.normal(size=(V, D))), init("w", np.ones(D)), init("b", np.zeros(D)),
             init("W1", rng.normal(size=(D, D)) * 0.3), init("head", rng.normal(size=(D, V)))]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x0"], name="embed"),
             helper.make_node("LayerNormalization", ["x0", "w", "b"], ["x1"], name="ln1"),
             helper.make_node("MatMul", ["x1", "W1"], ["x2"], name="fc")]
    w2, b2 = "w", "b"
    if identity:
        nodes += [helper.make_node("Identity", ["w"], ["blk.ln2.weight"], name="id_w"),
                  helper.make_node("Identity", ["b"], ["blk.ln2.bias"], name="id_b")]
        w2, b2 = "blk.ln2.weight", "blk.ln2.bias"
    nodes += [helper.make_node("LayerNormalization", ["x2", w2, b2], ["x3"], name="ln2"),
              helper.make_node("MatMul", ["x3", "head"], ["logits"], name="lm_head")]
    return model(nodes, inits, path)


def main():
    hetc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "tokens.bin")
    hdr = np.zeros(256, np.int32)
    hdr[0], hdr[1], hdr[2] = 20240520, 1, 4096
    with open(data, "wb") as f:
        f.write(hdr.tobytes())
        f.write(rng.integers(0, V, 4096).astype(np.uint16).tobytes())

    # dedups: one parameter per reader, named as the exporter named the reader
    for identity in (False, True):
        tag = "identity" if identity else "direct"
        path = os.path.join(work, "dedup_%s.onnx" % tag)
        dedup_model(path, identity)
        rows, err = listing(hetc, path, os.path.join(work, "l_" + tag))
        tr = sorted(n for n, r in (rows or {}).items() if r[0] == "trainable")
        want = sorted(["emb", "w", "b", "W1", "head"] +
                      (["blk.ln2.weight", "blk.ln2.bias"] if identity else ["w@ln2", "b@ln2"]))
        check(tr == want, "%s dedup untied: trainable %s" % (tag, tr))
        check("2 untied copies" in err, "%s dedup: report line says 2 untied copies" % tag)
        # train one step, export, and compare the exported model with onnxruntime
        exp = os.path.join(work, "dedup_%s_trained.onnx" % tag)
        ck = os.path.join(work, "ck_" + tag)
        p = subprocess.run([hetc, "train", path, "--precision", "fp32", "--data", data,
                            "--steps", "2", "--microbatch", str(B), "--seq", str(T), "--lr",
                            "0.05", "--no-checkpoint",
                            "--export", exp, "--dump-grads", ck], capture_output=True, text=True)
        check(p.returncode == 0, "%s dedup: hetc train --export (%s)" % (tag, p.stderr.strip()[-200:]))
        if p.returncode:
            continue
        m = onnx.load(exp)
        names = {t.name for t in m.graph.initializer}
        check(set(want) <= names, "%s dedup: export has one initializer per parameter" % tag)
        vals = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        check(not np.array_equal(vals["w"], vals[want[0] if False else
                                                   ("blk.ln2.weight" if identity else "w@ln2")]),
              "%s dedup: the two norms' weights were trained apart" % tag)
        import onnxruntime as ort
        x = rng.integers(0, V, (B, T)).astype(np.int64)
        got = ort.InferenceSession(exp, providers=["CPUExecutionProvider"]).run(
            None, {"input_ids": x})[0]
        # the same function written by hand from the exported weights
        def ln(h, w, b):
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            return (h - mu) / np.sqrt(var + 1e-5) * w + b
        w2 = vals["blk.ln2.weight" if identity else "w@ln2"]
        b2 = vals["blk.ln2.bias" if identity else "b@ln2"]
        h = ln(vals["emb"][x], vals["w"], vals["b"]) @ vals["W1"]
        ref = ln(h, w2, b2) @ vals["head"]
        check(np.abs(got - ref).max() < 1e-4, "%s dedup: exported model runs (ort vs numpy %.1e)"
              % (tag, np.abs(got - ref).max()))

    # a genuine tie (one table read by Gather and the head's MatMul) stays one
    emb = rng.normal(size=(V, D)).astype(np.float32)
    path = os.path.join(work, "tie.onnx")
    model([helper.make_node("Gather", ["emb", "input_ids"], ["x0"], name="embed"),
           helper.make_node("Transpose", ["emb"], ["embT"], name="t", perm=[1, 0]),
           helper.make_node("MatMul", ["x0", "embT"], ["logits"], name="lm_head")],
          [init("emb", emb)], path)
    rows, _ = listing(hetc, path, os.path.join(work, "l_tie"))
    check(rows is not None and [n for n, r in rows.items() if r[0] == "trainable"] == ["emb"],
          "tied embedding/head stays one parameter")

    # RoPE-style table: inv_freq x positions -> Cos, read by two Muls (a
    # computed table, param_kinds.c), a [1] scale (scalar rule), and a
    # -inf mask added to the activations (mask rule)
    inv = (1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x0"], name="embed"),
             helper.make_node("Shape", ["input_ids"], ["shp"], name="shape", start=1, end=2),
             helper.make_node("Squeeze", ["shp"], ["n"], name="sq"),
             helper.make_node("Cast", ["n"], ["nf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Range", ["zero", "nf", "one"], ["pos"], name="range"),
             helper.make_node("Unsqueeze", ["pos", "ax1"], ["pos2"], name="unsq"),
             helper.make_node("Mul", ["pos2", "inv_freq"], ["fr"], name="freqs"),
             helper.make_node("Concat", ["fr", "fr"], ["fr2"], name="cat", axis=-1),
             helper.make_node("Cos", ["fr2"], ["cos"], name="cos"),
             helper.make_node("Mul", ["x0", "cos"], ["q"], name="rot_q"),
             helper.make_node("Mul", ["x0", "cos"], ["k"], name="rot_k"),
             helper.make_node("Add", ["q", "k"], ["qk"], name="add"),
             helper.make_node("Mul", ["qk", "scale"], ["qs"], name="scale"),
             helper.make_node("MatMul", ["qs", "head"], ["lg"], name="lm_head"),
             helper.make_node("Transpose", ["lg"], ["lgT"], name="tr", perm=[0, 2, 1]),
             helper.make_node("Slice", ["lgT", "s0", "s1", "s2"], ["lgS"], name="sl"),
             helper.make_node("Add", ["lgS", "mask"], ["lgM"], name="mask_add"),
             helper.make_node("Transpose", ["lgM"], ["logits"], name="tr2", perm=[0, 2, 1])]
    inits = [init("emb", rng.normal(size=(V, D))), init("head", rng.normal(size=(D, T))),
             init("inv_freq", inv), init("scale", [0.5]), init("mask", mask),
             init("zero", 0.0), init("one", 1.0),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([T], np.int64), "s1"),
             numpy_helper.from_array(np.array([1], np.int64), "s2")]
    path = os.path.join(work, "tables.onnx")
    model(nodes, inits, path, oshape=(B, T, T))
    rows, err = listing(hetc, path, os.path.join(work, "l_tab"))
    kinds = {n: r[0] for n, r in (rows or {}).items()}
    # (shape inference folds the table once inv_freq is constant: it may be gone)
    check(rows is not None and kinds.get("inv_freq", "const") == "const" and "inv_freq" in err,
          "inv_freq (Cos region) is a buffer")
    check(rows is not None and kinds.get("scale") == "const", "one-element scale is a constant")
    check(rows is not None and kinds.get("mask") == "const", "-inf mask is a buffer")
    check(rows is not None and sorted(n for n, k in kinds.items() if k == "trainable") ==
          ["emb", "head"], "only emb and head are trained (%s)" % err.strip()[-300:])
    check("3 buffers kept constant" in err, "report names 3 buffers")

    # a table gathered by positions and read by two blocks (gpt-j's sin/cos
    # table) is a buffer; a position embedding gathered the same way and
    # read once (gpt2's wpe) stays a parameter
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x0"], name="embed"),
             helper.make_node("Shape", ["input_ids"], ["shp"], name="shape", start=1, end=2),
             helper.make_node("Squeeze", ["shp"], ["n"], name="sq"),
             helper.make_node("Range", ["zero_i", "n", "one_i"], ["pos"], name="range"),
             helper.make_node("Gather", ["wpe", "pos"], ["pe"], name="wpe_gather"),
             helper.make_node("Add", ["x0", "pe"], ["x1"], name="add_pe"),
             helper.make_node("Gather", ["sincos", "pos"], ["sc"], name="sc_gather"),
             helper.make_node("Mul", ["x1", "sc"], ["b0"], name="block0_rot"),
             helper.make_node("Mul", ["b0", "sc"], ["b1"], name="block1_rot"),
             helper.make_node("MatMul", ["b1", "head"], ["logits"], name="lm_head")]
    inits = [init("emb", rng.normal(size=(V, D))), init("head", rng.normal(size=(D, V))),
             init("wpe", rng.normal(size=(T, D))), init("sincos", rng.normal(size=(T, D))),
             numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
             numpy_helper.from_array(np.array(1, np.int64), "one_i")]
    ppath = os.path.join(work, "pos_tables.onnx")
    model(nodes, inits, ppath)
    rows, err = listing(hetc, ppath, os.path.join(work, "l_pos"))
    kinds = {n: r[0] for n, r in (rows or {}).items()}
    check(rows is not None and "sincos" in err and kinds.get("sincos", "const") == "const",
          "a position table read by two blocks is a buffer")
    check(rows is not None and kinds.get("wpe") == "trainable",
          "a position embedding read once stays a parameter")

    # overrides: --trainable, --frozen (wins), and a glob that matches nothing
    rows, err = listing(hetc, path, os.path.join(work, "l_ovr"), "--trainable", "inv_*",
                        "--frozen", "he*")
    kinds = {n: r[0] for n, r in (rows or {}).items()}
    check(rows is not None and kinds.get("inv_freq") == "trainable" and
          kinds.get("head") == "const", "--trainable inv_* / --frozen he* applied")
    rows, err = listing(hetc, path, os.path.join(work, "l_bad"), "--frozen", "nothing*")
    check(rows is None and "--frozen 'nothing*' matches no float initializer" in err,
          "a glob that matches nothing is an error naming it")

    print("%d failures" % len(fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
