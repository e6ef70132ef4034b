"""tools/gen_model.py: small --real-weights models through onnxruntime must
match an independent numpy implementation of the same model (written here
from the math, reading the weights by name from the external-data file), at
several batch/seq sizes and spelling options; the external-data layout must
be one 4096-aligned file; a large model without --real-weights must be a
sparse file that onnx.checker accepts.  usage: test_gen_model.py SOURCE_DIR"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
GEN = os.path.join(SRC, "tools", "gen_model.py")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def gen(out, *args):
    subprocess.run([sys.executable, GEN, "-o", out, *args], check=True, capture_output=True)


def weights_of(path):
    """name -> array for every initializer, external data read by onnx itself."""
    m = onnx.load(path, load_external_data=False)
    base = os.path.dirname(path)
    out = {}
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            onnx.external_data_helper.load_external_data_for_tensor(t, base)
        out[t.name] = numpy_helper.to_array(t)
    return m, out


# --- the oracle: float64 numpy, straight from the definitions --------------

def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def causal_attention(q, k, v):
    """q [B,H,T,hd], k/v [B,H,T,hd]: softmax(q k^T / sqrt(hd) + causal) v."""
    T, hd = q.shape[2], q.shape[3]
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    return softmax(s) @ v


def gpt_oracle(W, ids, L, H, eps, gelu, tied):
    W = {k: v.astype(np.float64) for k, v in W.items()}
    B, T = ids.shape
    x = W["wte.weight"][ids] + W["wpe.weight"][np.arange(T)]
    D = x.shape[-1]
    hd = D // H
    for i in range(L):
        p = f"h.{i}."
        h = layernorm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (qkv[..., j * D:(j + 1) * D].reshape(B, T, H, hd).transpose(0, 2, 1, 3)
                   for j in range(3))
        y = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = layernorm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        u = h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
        if gelu == "erf":
            u = 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))
        else:
            u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
        x = x + u @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layernorm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return x @ (W["wte.weight"].T if tied else W["lm_head.weight"])


def llama_oracle(W, ids, L, H, KV, eps, theta):
    W = {k: v.astype(np.float64) for k, v in W.items()}
    B, T = ids.shape
    x = W["tok_embeddings.weight"][ids]
    D = x.shape[-1]
    hd = D // H

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    # RoPE in the complex form (Meta's reference), pairs (j, j + hd/2): a
    # different formulation from rotate_half, same rotation.
    freq = theta ** (-np.arange(0, hd // 2) * 2.0 / hd)
    ang = np.arange(T)[:, None] * freq[None, :]
    rot = np.exp(1j * ang)

    def rope(t):
        c = (t[..., :hd // 2] + 1j * t[..., hd // 2:]) * rot
        return np.concatenate([c.real, c.imag], axis=-1)

    for i in range(L):
        p = f"layers.{i}."
        h = rms(x, W[p + "attention_norm.weight"])
        q = (h @ W[p + "attention.wq.weight"]).reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        k = (h @ W[p + "attention.wk.weight"]).reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        v = (h @ W[p + "attention.wv.weight"]).reshape(B, T, KV, hd).transpose(0, 2, 1, 3)
        q, k = rope(q), rope(k)
        k = np.repeat(k, H // KV, axis=1)  # query head j uses kv head j // (H/KV)
        v = np.repeat(v, H // KV, axis=1)
        y = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(B, T, H * hd)
        x = x + y @ W[p + "attention.wo.weight"]
        h = rms(x, W[p + "ffn_norm.weight"])
        g = h @ W[p + "feed_forward.w1.weight"]
        x = x + (g / (1 + np.exp(-g)) * (h @ W[p + "feed_forward.w3.weight"])) @ \
            W[p + "feed_forward.w2.weight"]
    return rms(x, W["norm.weight"]) @ W["output.weight"]


def compare(tag, path, oracle, vocab, sizes):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    _, W = weights_of(path)
    rng = np.random.default_rng(7)
    for B, T in sizes:
        ids = rng.integers(0, vocab, size=(B, T)).astype(np.int64)
        got = sess.run(["logits"], {"input_ids": ids})[0]
        ref = oracle(W, ids)
        err = np.abs(got - ref).max() / np.abs(ref).max()
        check(got.shape == ref.shape and err < 1e-5,
              f"{tag} B={B} T={T}: onnxruntime vs numpy max|diff|/max|ref| = {err:.2e}")


def layout(tag, path):
    m = onnx.load(path, load_external_data=False)
    data = os.path.join(os.path.dirname(path), os.path.basename(path) + ".data")
    size = os.path.getsize(data)
    ext = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    spans, ok = [], len(ext) > 0
    for t in ext:
        kv = {e.key: e.value for e in t.external_data}
        n = int(np.prod(t.dims)) * 4
        ok &= kv.get("location") == os.path.basename(data)
        ok &= int(kv["offset"]) % 4096 == 0 and int(kv["length"]) == n
        spans.append((int(kv["offset"]), int(kv["offset"]) + n))
    spans.sort()
    ok &= all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] <= size
    check(ok, f"{tag}: {len(ext)} external tensors in one file, 4096-aligned, disjoint, in bounds")
    inp = m.graph.input[0].type.tensor_type.shape.dim
    out = m.graph.output[0].type.tensor_type.shape.dim
    check([d.dim_param for d in inp] == ["batch", "seq"] and
          [d.dim_param for d in out[:2]] == ["batch", "seq"],
          f"{tag}: input_ids/logits have symbolic dims batch, seq")


def ops(path):
    return {n.op_type for n in onnx.load(path, load_external_data=False).graph.node}


with tempfile.TemporaryDirectory() as d:
    V, L, H, S = 97, 2, 4, 16
    sizes = [(2, 16), (1, 5), (3, 1)]
    variants = [
        ("gpt op17 fused-LN tanh tied", "gpt", ["--opset", "17"], dict(gelu="tanh", tied=True)),
        ("gpt op14 decomposed-LN erf untied", "gpt", ["--opset", "14", "--gelu", "erf",
                                                      "--untied-head"], dict(gelu="erf", tied=False)),
        ("llama op17 GQA", "llama", ["--opset", "17", "--kv-heads", "2"], dict(KV=2)),
        ("llama op14 MHA", "llama", ["--opset", "14", "--ffn", "96"], dict(KV=4)),
    ]
    for k, (tag, fam, extra, kw) in enumerate(variants):
        p = os.path.join(d, f"m{k}", "model.onnx")
        gen(p, "--family", fam, "--layers", str(L), "--hidden", "32", "--heads", str(H),
            "--vocab", str(V), "--seq", str(S), "--real-weights", "--seed", str(k),
            "--init-std", "0.25", *extra)  # 0.25 at d 32: sharp attention, every part matters
        onnx.checker.check_model(p, full_check=True)
        layout(tag, p)
        if fam == "gpt":
            eps = 1e-5
            oracle = lambda W, ids, kw=kw: gpt_oracle(W, ids, L, H, eps, kw["gelu"], kw["tied"])
            fused = "LayerNormalization" in ops(p)
            check(fused == ("17" in extra), f"{tag}: LayerNormalization iff opset 17")
        else:
            oracle = lambda W, ids, kw=kw: llama_oracle(W, ids, L, H, kw["KV"], 1e-6, 1e4)
        compare(tag, p, oracle, V, sizes)

    # A ~1.6 GB model without --real-weights: sparse, checker accepts it by path.
    p = os.path.join(d, "big", "model.onnx")
    gen(p, "--family", "llama", "--layers", "4", "--hidden", "4096", "--heads", "32",
        "--kv-heads", "8", "--vocab", "32000", "--seq", "256")
    st = os.stat(p + ".data")
    check(st.st_size > 1_000_000_000 and st.st_blocks * 512 < 1_000_000,
          f"sparse data file: {st.st_size} bytes logical, {st.st_blocks * 512} on disk")
    onnx.checker.check_model(p)
    check(True, "onnx.checker.check_model(path) accepts the sparse model")
    layout("big llama", p)

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
