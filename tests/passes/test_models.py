"""canonicalize on real exporter output: tiny GPT-2-style and LLaMA-style
models exported with torch.onnx here (if torch is installed), plus every
model in tests/models/.  The default pipeline must produce the canonical
ops (one Attention per layer, LayerNorm/RMSNorm, Gelu/SiLU, Linear) and the
result must match onnxruntime to rtol 1e-4 (and the reference outputs
committed beside a model); shape-infer's shape for every value must equal
the one onnxruntime computes.  Prints the op histograms."""
import glob
import os
import sys
import tempfile

import numpy as np
import onnx

import passes_util as pu

S = pu.Suite()
ROOT = None
TMP = tempfile.TemporaryDirectory()  # exports live here; removed at exit


def run_model(path, batch=2, seq=8, vocab=None):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = []
    for i in sess.get_inputs():
        saved = path[:-len(".onnx")] + ".%s.npy" % i.name  # inputs committed beside it
        if os.path.exists(saved):
            feeds.append(np.load(saved))
            continue
        shape = [d if isinstance(d, int) else (batch if "batch" in str(d).lower() or d == "B"
                                                 else seq) for d in i.shape]
        if "int" in i.type:
            hi = vocab or 10
            feeds.append(rng.integers(0, hi, size=shape).astype(
                np.int64 if "int64" in i.type else np.int32))
        else:
            feeds.append(rng.standard_normal(shape).astype(np.float32))
    r = pu.run_check(path, feeds)
    ref = pu.ort_run(path, feeds)
    for k, (g, e) in enumerate(zip(r.outputs, ref)):
        pu.assert_close(g, e, "%s output %d" % (os.path.basename(path), k))
    for k, o in enumerate(sess.get_outputs()):  # references committed beside it
        saved = path[:-len(".onnx")] + ".%s.npy" % o.name
        if os.path.exists(saved):
            pu.assert_close(r.outputs[k], np.load(saved), "%s vs %s" % (o.name, saved))
    print("  %s\n    before: %s\n    after:  %s" % (os.path.basename(path), r.info["before"],
                                                    r.info["after"]))
    return r


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def exported(kind, opset, approx="none", style="plain"):
    import export_tiny
    path = os.path.join(TMP.name, "%s_%d_%s_%s.onnx" % (kind, opset, approx, style))
    vocab = export_tiny.export(path, kind, opset, approx, style=style)
    return path, vocab


def expect(r, layers=2, norm="LayerNorm", act="Gelu", linears=9, embeddings=2):
    a = r.info["after"]
    assert a.get("Embedding", 0) == embeddings, a
    assert a.get("Attention", 0) == layers, a
    assert a.get(norm, 0) == 2 * layers + 1, a
    assert a.get(act, 0) == layers, a
    assert a.get("Linear", 0) == linears, a
    for gone in ("Softmax", "Erf", "Tanh", "Sigmoid", "ReduceMean", "Sqrt", "MatMul", "Shape"):
        assert a.get(gone, 0) == 0, "%s left: %s" % (gone, a)


@S.case
def torch_gpt_opset14_erf():
    if not have_torch():
        print("  (torch not installed: skipped)")
        return
    path, vocab = exported("gpt", 14)
    expect(run_model(path, vocab=vocab), linears=11)  # q, kv, proj, fc, out per layer + head


@S.case
def torch_gpt_opset17_tanh():
    if not have_torch():
        return
    path, vocab = exported("gpt", 17, "tanh")
    expect(run_model(path, vocab=vocab), linears=11)


@S.case
def torch_llama_opset17_sdpa():
    if not have_torch():
        return
    path, vocab = exported("llama", 17)
    # q, kv, proj, gate, up, down per layer + head
    expect(run_model(path, vocab=vocab), norm="RMSNorm", act="SiLU", linears=13, embeddings=1)


@S.case
def torch_hf_style_gpt():
    if not have_torch():
        return
    path, vocab = exported("gpt", 14, style="hf")
    expect(run_model(path, vocab=vocab), linears=11)  # q, kv, proj, fc, out per layer + head


@S.case
def torch_hf_style_llama_rotary_gqa():
    if not have_torch():
        return
    path, vocab = exported("llama", 17, style="hf")
    # q, kv, proj, gate, up, down per layer + head
    expect(run_model(path, vocab=vocab), norm="RMSNorm", act="SiLU", linears=13, embeddings=1)


def shapes_match_onnxruntime(path, feeds_from=None):
    """Every value shape-infer gives a shape must have the shape onnxruntime
    computes for it (all node outputs exposed as graph outputs)."""
    import onnxruntime as ort
    from onnx import helper
    m = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.output)}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in have and types.get(o):
                m.graph.output.append(helper.make_tensor_value_info(o, types[o], None))
                have.add(o)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = feeds_from(sess)
    outs = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds)))
    actual = {o.name: list(np.asarray(a).shape) for o, a in zip(sess.get_outputs(), outs)}
    r = pu.run_check(path, passes="shape-infer", values=True,
                     extra=sum((["--bind", "%s=%d" % (d, v)] for d, v in
                                bindings(path, feeds).items()), []))
    checked = 0
    for v in r.info["values"]:
        if v["name"] in actual and v["shape"] is not None:
            assert v["shape"] == actual[v["name"]], "%s: '%s' inferred %s, onnxruntime %s" % (
                os.path.basename(path), v["name"], v["shape"], actual[v["name"]])
            checked += 1
    assert checked > 50, "only %d values compared" % checked
    print("  %s: %d value shapes equal onnxruntime's" % (os.path.basename(path), checked))


def bindings(path, feeds):
    """dim_param -> extent, from the graph inputs and the arrays fed."""
    m = onnx.load(path, load_external_data=False)
    out = {}
    for i, a in zip([i for i in m.graph.input if i.name not in
                     {t.name for t in m.graph.initializer}], feeds):
        for d, n in zip(i.type.tensor_type.shape.dim, a.shape):
            if d.dim_param:
                out[d.dim_param] = n
    return out


def committed_feeds(path):
    """Inputs committed beside the model, or small token ids [2, 8]."""
    def make(sess):
        out = []
        for i in sess.get_inputs():
            saved = path[:-len(".onnx")] + ".%s.npy" % i.name
            out.append(np.load(saved) if os.path.exists(saved) else
                       np.random.default_rng(0).integers(0, 10, (2, 8)).astype(np.int64))
        return out
    return make


@S.case
def shape_infer_matches_onnxruntime_on_every_value():
    for path in committed_models():
        shapes_match_onnxruntime(path, committed_feeds(path))
    if have_torch():
        path, vocab = exported("llama", 17, style="hf")
        rng = np.random.default_rng(3)
        shapes_match_onnxruntime(path, lambda sess: [rng.integers(0, vocab, (2, 8))])


def committed_models():
    return sorted(glob.glob(os.path.join(ROOT, "tests", "models", "*.onnx")))


@S.case
def committed_exports():
    for path in committed_models():
        m = onnx.load(path, load_external_data=False)
        softmax = sum(1 for n in m.graph.node if n.op_type == "Softmax")
        r = run_model(path)
        a = r.info["after"]
        # every attention softmax becomes an Attention
        assert a.get("Attention", 0) == softmax and a.get("Softmax", 0) == 0, a
        assert a.get("LayerNorm", 0) + a.get("RMSNorm", 0) > 0, a
        assert a.get("Linear", 0) > 0, a


if __name__ == "__main__":
    pu.init(sys.argv)
    ROOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..")
    sys.exit(S.run())
