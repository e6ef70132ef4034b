#!/usr/bin/env python3
"""Generate a GPT- or LLaMA-family ONNX model of any size, without torch.

    python3 tools/gen_model.py --family gpt --layers 48 --hidden 8192 --heads 64 \\
        --vocab 51200 --seq 1024 -o /tmp/gpt39b/model.onnx          # Alpa's GPT-39B
    python3 tools/gen_model.py --family llama --layers 2 --hidden 64 --heads 4 \\
        --kv-heads 2 --vocab 256 --seq 16 --real-weights -o /tmp/l/model.onnx

The graph is spelled the way torch.onnx (TorchScript exporter) spells these
models (see docs/MODELS.md for the exported histograms): nn.Linear as MatMul
(+ Add), LayerNormalization (opset >= 17) or its ReduceMean/Sub/Pow/Sqrt/Div
decomposition, GELU decomposed with Tanh (GPT-2's new_gelu) or Erf, attention
as MatMul / scale / causal mask (Where on a sliced tril buffer for GPT, an
added -inf triangle for LLaMA) / Softmax / MatMul, RMSNorm as
Pow/ReduceMean/Add/Sqrt/Div/Mul, RoPE with rotate_half (Slice/Neg/Concat),
grouped-query attention via Unsqueeze/Expand/Reshape (repeat_kv), SwiGLU as
Sigmoid/Mul.  Batch and sequence dims are symbolic ("batch", "seq") and all
reshapes are built from Shape(input_ids) as torch does, so one file serves
every batch/seq <= --seq.

Every weight is external data in ONE file next to the model (<model>.data),
each tensor at a 4096-aligned offset (location/offset/length entries).  The
file is created with truncate, so without --real-weights it is a sparse file
of holes: a 100B-parameter model occupies ~no disk but has its full logical
size, and nothing reads it for planning.  --real-weights writes seeded
random tensors (for small models, so onnxruntime can run them).  Small
constants (the causal mask, the RoPE cos/sin tables, shapes, scalars) are
Constant nodes, as torch writes them, always real.
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ALIGN = 4096
IR_VERSION = 8  # what the TorchScript exporter writes; read by every onnxruntime


def default_ffn(family, hidden):
    if family == "gpt":
        return 4 * hidden
    # LLaMA: 2/3 of 4h, rounded up to a multiple of 256 (multiple_of in Meta's code)
    f = int(2 * 4 * hidden / 3)
    return 256 * ((f + 255) // 256)


class Builder:
    """Nodes, inline constants and external weights of one graph."""

    def __init__(self, data_name, real, seed):
        self.nodes, self.inits, self.weights = [], [], []
        self.data_name, self.real, self.seed = data_name, real, seed
        self.offset = 0
        self.counter = {}
        self.consts = {}

    def uniq(self, base):
        k = self.counter.get(base, 0)
        self.counter[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def op(self, op_type, inputs, scope, n_out=1, **attrs):
        name = self.uniq(f"{scope}/{op_type}")
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.float32):
        """A Constant node (shared between uses of the same value).  Like the
        TorchScript exporter, only learned weights are initializers;
        scalars, shapes and buffers are Constant nodes."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self.consts:
            self.consts[key] = self._constant(arr, "")
        return self.consts[key]

    def buffer(self, name, arr):
        """A registered buffer (mask, RoPE tables): a Constant node too."""
        return self._constant(arr, "/" + name)

    def _constant(self, arr, scope):
        name = self.uniq(f"{scope}/Constant")
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(arr)))
        return out

    def weight(self, name, shape, init):
        """An external-data float32 parameter; init is ('normal', std) or ('one', std)."""
        n = int(np.prod(shape))
        length = 4 * n
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", self.data_name), ("offset", str(self.offset)),
                     ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.inits.append(t)
        self.weights.append((name, tuple(shape), self.offset, length, init))
        self.offset += (length + ALIGN - 1) // ALIGN * ALIGN
        return name


def weight_values(seed, index, shape, init, init_std=0.02):
    """The --real-weights value of weight number `index` (own RNG stream
    each).  Matrices: N(0, init_std); biases N(0, 0.01); norm gains N(1, 0.05)."""
    kind, std = init
    if kind == "normal" and len(shape) >= 2:
        std = init_std
    rng = np.random.default_rng([seed, index])
    a = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return a + np.float32(1.0) if kind == "one" else a


# ---------------------------------------------------------------------------
# Shared pieces

def dims(b, ids):
    """B, T as 1-D int64 tensors from Shape(input_ids), as torch computes them."""
    shape = b.op("Shape", [ids], "")
    bt = []
    for i in (0, 1):
        s = b.op("Gather", [shape, b.const(i, np.int64)], "", axis=0)
        bt.append(b.op("Unsqueeze", [s, b.const([0], np.int64)], ""))
    return bt


def shape_of(b, scope, *parts):
    """Concat of 1-D dims (names) and ints, for Reshape/Expand."""
    ins = [p if isinstance(p, str) else b.const([p], np.int64) for p in parts]
    return b.op("Concat", ins, scope, axis=0)


def linear(b, x, scope, n_in, n_out, bias):
    w = b.weight(f"{scope}.weight", [n_in, n_out], ("normal", 0.02))
    y = b.op("MatMul", [x, w], "/" + scope.replace(".", "/"))
    if bias:
        bb = b.weight(f"{scope}.bias", [n_out], ("normal", 0.01))
        y = b.op("Add", [y, bb], "/" + scope.replace(".", "/"))
    return y


def layer_norm(b, x, scope, d, eps, fused):
    g = b.weight(f"{scope}.weight", [d], ("one", 0.05))
    beta = b.weight(f"{scope}.bias", [d], ("normal", 0.01))
    s = "/" + scope.replace(".", "/")
    if fused:
        return b.op("LayerNormalization", [x, g, beta], s, axis=-1, epsilon=eps)
    # torch's opset < 17 decomposition of aten::layer_norm
    mean = b.op("ReduceMean", [x], s, axes=[-1], keepdims=1)
    xc = b.op("Sub", [x, mean], s)
    sq = b.op("Pow", [xc, b.const(2.0)], s)
    var = b.op("ReduceMean", [sq], s, axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.const(eps)], s)], s)
    y = b.op("Div", [xc, std], s)
    return b.op("Add", [b.op("Mul", [y, g], s), beta], s)


def rms_norm(b, x, scope, d, eps):
    """x * rsqrt(mean(x^2) + eps) * w; torch writes rsqrt as Sqrt then Div(1, .)."""
    w = b.weight(f"{scope}.weight", [d], ("one", 0.05))
    s = "/" + scope.replace(".", "/")
    ms = b.op("ReduceMean", [b.op("Pow", [x, b.const(2.0)], s)], s, axes=[-1], keepdims=1)
    r = b.op("Div", [b.const(1.0), b.op("Sqrt", [b.op("Add", [ms, b.const(eps)], s)], s)], s)
    return b.op("Mul", [b.op("Mul", [x, r], s), w], s)


def gelu(b, x, s, kind):
    if kind == "erf":  # F.gelu(approximate='none') at opset < 20
        e = b.op("Erf", [b.op("Div", [x, b.const(math.sqrt(2.0))], s)], s)
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const(1.0)], s)], s),
                            b.const(0.5)], s)
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    x3 = b.op("Pow", [x, b.const(3.0)], s)
    inner = b.op("Add", [x, b.op("Mul", [x3, b.const(0.044715)], s)], s)
    t = b.op("Tanh", [b.op("Mul", [inner, b.const(math.sqrt(2.0 / math.pi))], s)], s)
    return b.op("Mul", [b.op("Mul", [x, b.const(0.5)], s), b.op("Add", [t, b.const(1.0)], s)], s)


def heads_split(b, x, s, B, T, h, hd):
    """[B,T,h*hd] -> [B,h,T,hd]"""
    r = b.op("Reshape", [x, shape_of(b, s, B, T, h, hd)], s)
    return b.op("Transpose", [r], s, perm=[0, 2, 1, 3])


def heads_merge(b, y, s, B, T, d):
    t = b.op("Transpose", [y], s, perm=[0, 2, 1, 3])
    return b.op("Reshape", [t, shape_of(b, s, B, T, d)], s)


# ---------------------------------------------------------------------------
# GPT-2 family

def build_gpt(b, a, ids):
    D, H, F, V, S = a.hidden, a.heads, a.ffn, a.vocab, a.seq
    hd = D // H
    B, T = dims(b, ids)
    wte = b.weight("wte.weight", [V, D], ("normal", 0.02))
    wpe = b.weight("wpe.weight", [S, D], ("normal", 0.02))
    # causal mask buffer [1,1,S,S] (HF GPT-2's attn.bias), sliced to [:T,:T]
    tril = np.tril(np.ones((S, S), dtype=bool)).reshape(1, 1, S, S)
    mask = b.buffer("bias", tril)
    T_s = b.op("Squeeze", [T, b.const([0], np.int64)], "")
    pos = b.op("Range", [b.const(0, np.int64), T_s, b.const(1, np.int64)], "")
    x = b.op("Add", [b.op("Gather", [wte, ids], "/wte"), b.op("Gather", [wpe, pos], "/wpe")], "")
    causal = b.op("Slice", [mask, b.const([0, 0], np.int64), shape_of(b, "", T, T),
                            b.const([2, 3], np.int64)], "")
    neg_inf = b.const(-np.inf)
    scale = b.const(1.0 / math.sqrt(hd))
    for i in range(a.layers):
        p = f"h.{i}"
        s = f"/h.{i}/attn"
        h = layer_norm(b, x, f"{p}.ln_1", D, a.eps, a.fused_ln)
        qkv = linear(b, h, f"{p}.attn.c_attn", D, 3 * D, True)
        q, k, v = b.op("Split", [qkv, b.const([D, D, D], np.int64)], s, n_out=3, axis=2)
        q = heads_split(b, q, s, B, T, H, hd)
        v = heads_split(b, v, s, B, T, H, hd)
        k = b.op("Transpose", [b.op("Reshape", [k, shape_of(b, s, B, T, H, hd)], s)], s,
                 perm=[0, 2, 3, 1])  # k.transpose(1,2).transpose(-2,-1), fused
        att = b.op("Mul", [b.op("MatMul", [q, k], s), scale], s)
        att = b.op("Where", [causal, att, neg_inf], s)
        att = b.op("Softmax", [att], s, axis=-1)
        y = heads_merge(b, b.op("MatMul", [att, v], s), s, B, T, D)
        x = b.op("Add", [x, linear(b, y, f"{p}.attn.c_proj", D, D, True)], f"/h.{i}")
        h = layer_norm(b, x, f"{p}.ln_2", D, a.eps, a.fused_ln)
        h = gelu(b, linear(b, h, f"{p}.mlp.c_fc", D, F, True), f"/h.{i}/mlp", a.gelu)
        x = b.op("Add", [x, linear(b, h, f"{p}.mlp.c_proj", F, D, True)], f"/h.{i}")
    x = layer_norm(b, x, "ln_f", D, a.eps, a.fused_ln)
    if a.untied_head:
        head = b.weight("lm_head.weight", [D, V], ("normal", 0.02))
    else:  # tied: lm_head = wte^T, written as the unfolded exporter writes it
        head = b.op("Transpose", [wte], "/lm_head", perm=[1, 0])
    return b.op("MatMul", [x, head], "/lm_head")


# ---------------------------------------------------------------------------
# LLaMA family

def rope_tables(S, hd, theta):
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    f = np.outer(np.arange(S, dtype=np.float64), inv)
    emb = np.concatenate([f, f], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def rotate_half(b, x, s, hd):
    x1 = b.op("Slice", [x, b.const([0], np.int64), b.const([hd // 2], np.int64),
                        b.const([-1], np.int64)], s)
    x2 = b.op("Slice", [x, b.const([hd // 2], np.int64), b.const([hd], np.int64),
                        b.const([-1], np.int64)], s)
    return b.op("Concat", [b.op("Neg", [x2], s), x1], s, axis=-1)


def build_llama(b, a, ids):
    D, H, KV, F, V, S = a.hidden, a.heads, a.kv_heads, a.ffn, a.vocab, a.seq
    hd, rep = D // H, H // KV
    B, T = dims(b, ids)
    emb = b.weight("tok_embeddings.weight", [V, D], ("normal", 0.02))
    cos_t, sin_t = rope_tables(S, hd, a.rope_theta)
    cos_b, sin_b = b.buffer("cos_cached", cos_t), b.buffer("sin_cached", sin_t)
    mask_b = b.buffer("mask_cached", np.triu(np.full((S, S), -np.inf, dtype=np.float32), 1))
    z1, ax0 = b.const([0], np.int64), b.const([0], np.int64)
    cos = b.op("Slice", [cos_b, z1, T, ax0], "")
    sin = b.op("Slice", [sin_b, z1, T, ax0], "")
    mask = b.op("Slice", [mask_b, b.const([0, 0], np.int64), shape_of(b, "", T, T),
                          b.const([0, 1], np.int64)], "")
    x = b.op("Gather", [emb, ids], "/tok_embeddings")
    inv_scale = b.const(math.sqrt(hd))
    for i in range(a.layers):
        p = f"layers.{i}"
        s = f"/layers.{i}/attention"
        h = rms_norm(b, x, f"{p}.attention_norm", D, a.eps)
        q = heads_split(b, linear(b, h, f"{p}.attention.wq", D, H * hd, False), s, B, T, H, hd)
        k = heads_split(b, linear(b, h, f"{p}.attention.wk", D, KV * hd, False), s, B, T, KV, hd)
        v = heads_split(b, linear(b, h, f"{p}.attention.wv", D, KV * hd, False), s, B, T, KV, hd)
        q = b.op("Add", [b.op("Mul", [q, cos], s), b.op("Mul", [rotate_half(b, q, s, hd), sin], s)], s)
        k = b.op("Add", [b.op("Mul", [k, cos], s), b.op("Mul", [rotate_half(b, k, s, hd), sin], s)], s)
        if rep > 1:  # repeat_kv: [B,KV,T,hd] -> [B,KV,rep,T,hd] -> [B,H,T,hd]
            shp5 = shape_of(b, s, B, KV, rep, T, hd)
            shp4 = shape_of(b, s, B, H, T, hd)
            two = b.const([2], np.int64)
            k = b.op("Reshape", [b.op("Expand", [b.op("Unsqueeze", [k, two], s), shp5], s), shp4], s)
            v = b.op("Reshape", [b.op("Expand", [b.op("Unsqueeze", [v, two], s), shp5], s), shp4], s)
        kt = b.op("Transpose", [k], s, perm=[0, 1, 3, 2])
        att = b.op("Div", [b.op("MatMul", [q, kt], s), inv_scale], s)
        att = b.op("Softmax", [b.op("Add", [att, mask], s)], s, axis=-1)
        y = heads_merge(b, b.op("MatMul", [att, v], s), s, B, T, H * hd)
        x = b.op("Add", [x, linear(b, y, f"{p}.attention.wo", H * hd, D, False)], f"/layers.{i}")
        h = rms_norm(b, x, f"{p}.ffn_norm", D, a.eps)
        s = f"/layers.{i}/feed_forward"
        g = linear(b, h, f"{p}.feed_forward.w1", D, F, False)
        g = b.op("Mul", [g, b.op("Sigmoid", [g], s)], s)  # F.silu
        u = linear(b, h, f"{p}.feed_forward.w3", D, F, False)
        x = b.op("Add", [x, linear(b, b.op("Mul", [g, u], s), f"{p}.feed_forward.w2", F, D, False)],
                 f"/layers.{i}")
    x = rms_norm(b, x, "norm", D, a.eps)
    return linear(b, x, "output", D, V, False)


# ---------------------------------------------------------------------------

def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=("gpt", "llama"), required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=0, help="LLaMA GQA KV heads (default: --heads)")
    ap.add_argument("--ffn", type=int, default=0,
                    help="MLP width (default: 4*hidden for gpt, LLaMA's 8/3*hidden rounded to 256)")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True,
                    help="max sequence length (position table / mask / RoPE size)")
    ap.add_argument("--opset", type=int, default=17, help="14..17 (LayerNormalization needs 17)")
    ap.add_argument("--batch-dim-name", default="batch")
    ap.add_argument("--seq-dim-name", default="seq")
    ap.add_argument("--symbolic", action="store_true",
                    help="symbolic batch/seq dims named by the two options above (the default)")
    ap.add_argument("--static", type=int, default=0, metavar="BATCH",
                    help="fixed dims [BATCH, --seq] instead of symbolic ones")
    ap.add_argument("--layernorm", choices=("auto", "fused", "decomposed"), default="auto",
                    help="auto: LayerNormalization at opset >= 17, decomposed below (as torch)")
    ap.add_argument("--gelu", choices=("tanh", "erf"), default="tanh")
    ap.add_argument("--untied-head", action="store_true", help="GPT: own lm_head.weight")
    ap.add_argument("--eps", type=float, default=None)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--real-weights", action="store_true",
                    help="write seeded random weights (small models only)")
    ap.add_argument("--max-real-bytes", type=int, default=1 << 30,
                    help="refuse --real-weights above this many bytes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-std", type=float, default=0.02,
                    help="--real-weights: std of matrices and embeddings (tests use more, so "
                         "attention is far from uniform)")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    a.kv_heads = a.kv_heads or a.heads
    a.ffn = a.ffn or default_ffn(a.family, a.hidden)
    if a.eps is None:
        a.eps = 1e-5 if a.family == "gpt" else 1e-6
    errs = []
    if a.hidden % a.heads:
        errs.append(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.heads % a.kv_heads:
        errs.append(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    if a.family == "gpt" and a.kv_heads != a.heads:
        errs.append("--kv-heads is LLaMA only")
    if a.family == "llama" and (a.hidden // a.heads) % 2:
        errs.append("RoPE needs an even head dim")
    if not 14 <= a.opset <= 17:
        errs.append(f"--opset {a.opset}: supported 14..17")
    if a.layernorm == "fused" and a.opset < 17:
        errs.append("LayerNormalization needs --opset 17")
    if min(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.ffn) < 1:
        errs.append("sizes must be positive")
    if a.symbolic and a.static:
        errs.append("--symbolic and --static exclude each other")
    if errs:
        ap.error("; ".join(errs))
    a.fused_ln = a.layernorm == "fused" or (a.layernorm == "auto" and a.opset >= 17)
    return a


def generate(a):
    """Write the model and its data file; returns (model path, data path, Builder)."""
    out = os.path.abspath(a.output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    data_name = os.path.basename(out) + ".data"
    data_path = os.path.join(os.path.dirname(out), data_name)
    b = Builder(data_name, a.real_weights, a.seed)
    bdim = a.static if a.static else a.batch_dim_name
    sdim = a.seq if a.static else a.seq_dim_name
    ids = "input_ids"
    logits = (build_gpt if a.family == "gpt" else build_llama)(b, a, ids)
    for n in b.nodes:  # the head's MatMul writes the graph output directly, as in torch
        for i, o in enumerate(n.output):
            if o == logits:
                n.output[i] = "logits"
    graph = helper.make_graph(
        b.nodes, f"{a.family}_{a.layers}x{a.hidden}",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, [bdim, sdim])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [bdim, sdim, a.vocab])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", a.opset)],
                              producer_name="hetc tools/gen_model.py")
    model.ir_version = IR_VERSION
    total = b.offset
    real = sum(w[3] for w in b.weights)
    if a.real_weights and real > a.max_real_bytes:
        sys.exit(f"gen_model: --real-weights would write {real} bytes (> --max-real-bytes)")
    with open(data_path, "wb") as f:
        f.truncate(total)  # sparse: holes until written
        if a.real_weights:
            for idx, (name, shape, off, length, init) in enumerate(b.weights):
                f.seek(off)
                f.write(weight_values(a.seed, idx, shape, init, a.init_std).tobytes())
    with open(out, "wb") as f:
        f.write(model.SerializeToString())
    return out, data_path, b


def main(argv=None):
    a = parse(argv)
    out, data_path, b = generate(a)
    n = sum(int(np.prod(w[1])) for w in b.weights)
    st = os.stat(data_path)
    print(f"{out}: {len(b.nodes)} nodes, {len(b.weights)} weights, {n} parameters "
          f"({n / 1e9:.2f} B)")
    print(f"{data_path}: {st.st_size} bytes logical, {st.st_blocks * 512} bytes on disk"
          f"{' (real weights)' if a.real_weights else ' (sparse)'}")


if __name__ == "__main__":
    main()
