#!/usr/bin/env python3
"""Export the committed test models (and the embedded example) from our own
PyTorch code with the TorchScript ONNX exporter.

    python3 tools/export_test_models.py            # tests/models/{gpt2,llama}_op{14,17}.onnx
    python3 tools/export_test_models.py --example  # examples/gpt_tiny.onnx + tiny_corpus.bin
    python3 tools/make_references.py               # then the onnxruntime reference outputs

Two families, written the way the usual open-source code spells them so the
exported graphs carry the exporter patterns hetc's canonicalize must match:

  gpt2   token + learned position embedding, pre-LN blocks (nn.LayerNorm),
         causal self-attention written out (q @ k^T * scale, masked_fill with
         -inf from a registered tril buffer, softmax, @ v), GPT-2's new_gelu
         (tanh approximation written with torch.tanh / torch.pow), residuals,
         final LayerNorm, LM head tied to the token embedding.
  llama  RMSNorm written out, rotary embeddings (precomputed cos/sin buffers,
         rotate_half), grouped-query attention (repeat_kv), additive causal
         mask, SwiGLU MLP, no biases, untied head.

For each family the weights (state_dict, fixed seed) go to
tests/models/<family>.npz and the config to tests/models/<family>.json;
build_model(config) rebuilds the same nn.Module (tools/torch_reference.py and
the training tests reload the weights into it).  Needs torch; CI does not:
the committed files are the product.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "tests", "models")
EXAMPLES_DIR = os.path.join(ROOT, "examples")

OPSETS = (14, 17)

# Tiny sizes: each export is well under 1 MB.  init_std 0.1 rather than
# GPT-2's 0.02: at 0.02 and d 64 attention is nearly uniform, and a 10%
# error in the softmax scale moves the logits by only 7e-4 relative; at 0.1
# it moves them by 5e-2, so a 1e-4 comparison sees every part of the model.
CONFIGS = {
    "gpt2": dict(family="gpt2", vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_kv_head=4,
                 ffn=256, seq=16, batch=2, eps=1e-5, init_std=0.1, seed=1234),
    "llama": dict(family="llama", vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_kv_head=2,
                  ffn=172, seq=16, batch=2, eps=1e-6, rope_theta=10000.0, init_std=0.1,
                  seed=4321),
}
# The embedded example (scripts/demo): a bit bigger, still < 5 MB.
EXAMPLE = dict(family="gpt2", vocab_size=512, n_embd=128, n_layer=4, n_head=4, n_kv_head=4,
               ffn=512, seq=64, batch=2, eps=1e-5, init_std=0.1, seed=2024)

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the module is importable without torch for its configs
    torch = None
    nn = None


if torch is not None:

    def new_gelu(x):
        """GPT-2's gelu (tanh approximation), spelled as in nanoGPT / HF."""
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class GPT2Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, self.n_head = c["n_embd"], c["n_head"]
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            T = c["seq"]
            # HF GPT-2 registers the causal mask as a buffer; not persistent so
            # the state_dict holds only learned weights.
            self.register_buffer("bias", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                                 persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            hs = C // self.n_head
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, self.n_head, hs).transpose(1, 2)
            k = k.view(B, T, self.n_head, hs).transpose(1, 2)
            v = v.view(B, T, self.n_head, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class GPT2MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = nn.Linear(c["n_embd"], c["ffn"])
            self.c_proj = nn.Linear(c["ffn"], c["n_embd"])

        def forward(self, x):
            return self.c_proj(new_gelu(self.c_fc(x)))

    class GPT2Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c["n_embd"], eps=c["eps"])
            self.attn = GPT2Attention(c)
            self.ln_2 = nn.LayerNorm(c["n_embd"], eps=c["eps"])
            self.mlp = GPT2MLP(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
            self.wpe = nn.Embedding(c["seq"], c["n_embd"])
            self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["n_layer"])])
            self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["eps"])
            self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying
            # GPT-2's init shape, N(0, init_std) for matrices and embeddings
            # (see CONFIGS), biases small non-zero so a test would notice a
            # dropped bias.
            std = c.get("init_std", 0.02)
            for name, p in self.named_parameters():
                if name.endswith("weight") and p.dim() >= 2:
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.normal_(p, 0.0, 0.01)
                else:  # LayerNorm weight: near 1, not exactly, so gamma matters
                    nn.init.normal_(p, 1.0, 0.05)

        def forward(self, input_ids):
            B, T = input_ids.shape
            pos = torch.arange(0, T, dtype=torch.long, device=input_ids.device)
            x = self.wte(input_ids) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            return self.lm_head(self.ln_f(x))

    class RMSNorm(nn.Module):
        def __init__(self, d, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(x, n_rep):
        """[B, n_kv, T, hs] -> [B, n_kv * n_rep, T, hs], as in HF LLaMA."""
        B, n_kv, T, hs = x.shape
        if n_rep == 1:
            return x
        x = x[:, :, None, :, :].expand(B, n_kv, n_rep, T, hs)
        return x.reshape(B, n_kv * n_rep, T, hs)

    class LlamaAttention(nn.Module):
        def __init__(self, c):
            super().__init__()
            d = c["n_embd"]
            self.n_head, self.n_kv = c["n_head"], c["n_kv_head"]
            self.hs = d // self.n_head
            self.wq = nn.Linear(d, self.n_head * self.hs, bias=False)
            self.wk = nn.Linear(d, self.n_kv * self.hs, bias=False)
            self.wv = nn.Linear(d, self.n_kv * self.hs, bias=False)
            self.wo = nn.Linear(self.n_head * self.hs, d, bias=False)

        def forward(self, x, cos, sin, mask):
            B, T, _ = x.shape
            q = self.wq(x).view(B, T, self.n_head, self.hs).transpose(1, 2)
            k = self.wk(x).view(B, T, self.n_kv, self.hs).transpose(1, 2)
            v = self.wv(x).view(B, T, self.n_kv, self.hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = repeat_kv(k, self.n_head // self.n_kv)
            v = repeat_kv(v, self.n_head // self.n_kv)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hs)
            att = att + mask
            att = F.softmax(att.float(), dim=-1).type_as(q)
            y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, -1)
            return self.wo(y)

    class LlamaMLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.w1 = nn.Linear(c["n_embd"], c["ffn"], bias=False)
            self.w2 = nn.Linear(c["ffn"], c["n_embd"], bias=False)
            self.w3 = nn.Linear(c["n_embd"], c["ffn"], bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class LlamaBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.attention_norm = RMSNorm(c["n_embd"], c["eps"])
            self.attention = LlamaAttention(c)
            self.ffn_norm = RMSNorm(c["n_embd"], c["eps"])
            self.feed_forward = LlamaMLP(c)

        def forward(self, x, cos, sin, mask):
            h = x + self.attention(self.attention_norm(x), cos, sin, mask)
            return h + self.feed_forward(self.ffn_norm(h))

    class Llama(nn.Module):
        def __init__(self, c):
            super().__init__()
            d, T = c["n_embd"], c["seq"]
            hs = d // c["n_head"]
            self.tok_embeddings = nn.Embedding(c["vocab_size"], d)
            self.layers = nn.ModuleList([LlamaBlock(c) for _ in range(c["n_layer"])])
            self.norm = RMSNorm(d, c["eps"])
            self.output = nn.Linear(d, c["vocab_size"], bias=False)
            inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
            freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)  # [T, hs], HF layout
            self.register_buffer("cos_cached", emb.cos(), persistent=False)
            self.register_buffer("sin_cached", emb.sin(), persistent=False)
            self.register_buffer("mask_cached", torch.full((T, T), float("-inf")).triu(1),
                                 persistent=False)
            std = c.get("init_std", 0.02)
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, std)
                else:  # RMSNorm weights near 1
                    nn.init.normal_(p, 1.0, 0.05)

        def forward(self, input_ids):
            B, T = input_ids.shape
            x = self.tok_embeddings(input_ids)
            cos, sin = self.cos_cached[:T], self.sin_cached[:T]
            mask = self.mask_cached[:T, :T]
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            return self.output(self.norm(x))


def build_model(config):
    """The nn.Module for a config dict (as written to tests/models/<name>.json).
    Weights are the seeded init; load the .npz to get the committed ones."""
    if torch is None:
        sys.exit("export_test_models: torch is needed to build the models")
    torch.manual_seed(int(config["seed"]))
    fam = config["family"]
    if fam in ("gpt2", "gpt"):
        return GPT2(config)
    if fam == "llama":
        return Llama(config)
    sys.exit(f"export_test_models: unknown family {fam!r}")


def export_onnx(model, config, path, opset):
    """TorchScript exporter, dynamic batch/seq axes."""
    ids = torch.zeros((config["batch"], config["seq"]), dtype=torch.long)
    ids[:] = torch.arange(config["seq"]) % config["vocab_size"]
    torch.onnx.export(model, (ids,), path, dynamo=False, opset_version=opset,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                    "logits": {0: "batch", 1: "seq"}},
                      do_constant_folding=True)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    got = m.opset_import[0].version if m.opset_import else None
    if got != opset:
        print(f"  note: asked for opset {opset}, file says {got}")


def op_histogram(path):
    import onnx
    from collections import Counter
    m = onnx.load(path)
    return Counter(n.op_type for n in m.graph.node)


def save_weights(model, path):
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    np.savez(path, **sd)


def initializer_map(model, path):
    """Which state_dict entry each ONNX initializer holds.  With constant
    folding the exporter stores Linear weights pre-transposed under
    generated names (onnx::MatMul_NNN), and the tied LM head becomes its own
    initializer (wte.weight^T): the tie is not visible in the graph.  Matched
    by value, so a training test can map torch gradients to ONNX names."""
    import onnx
    from onnx import numpy_helper
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    out = {}
    for init in onnx.load(path).graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype != np.float32:
            continue
        hit = None
        for k, w in sd.items():
            if init.name == k and w.shape == a.shape and np.array_equal(w, a):
                hit = {"param": k, "transposed": False}
            elif w.ndim == 2 and w.T.shape == a.shape and np.array_equal(w.T, a):
                hit = hit or {"param": k, "transposed": True}
            elif w.shape == a.shape and np.array_equal(w, a):
                hit = hit or {"param": k, "transposed": False}
        if hit:
            out[init.name] = hit
    return out


def export_family(name, config, out_dir, opsets, stem=None, weights=True):
    model = build_model(config).eval()
    stem = stem or name
    wpath = os.path.join(out_dir, stem + ".npz")
    if weights:
        save_weights(model, wpath)
    files, maps = [], {}
    for op in opsets:
        onnx_name = f"{stem}_op{op}.onnx" if len(opsets) > 1 else f"{stem}.onnx"
        p = os.path.join(out_dir, onnx_name)
        export_onnx(model, config, p, op)
        files.append(onnx_name)
        maps[onnx_name] = initializer_map(model, p)
        hist = op_histogram(p)
        print(f"{p}: {os.path.getsize(p)} bytes, {sum(hist.values())} nodes")
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items())))
    cfg = dict(config)
    cfg["opsets"] = list(opsets)
    cfg["onnx"] = files
    cfg["weights"] = os.path.basename(wpath) if weights else None
    cfg["initializers"] = maps
    cfg["torch"] = torch.__version__
    cfg["exporter"] = "torch.onnx.export(dynamo=False) (TorchScript)"
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return files


# ---------------------------------------------------------------------------
# The tiny training corpus: deterministic synthetic English from a small
# grammar, byte-level tokens (vocab 256), llm.c's .bin layout.

_SUBJ = ["the old miller", "a young sailor", "the grey cat", "my neighbour", "the quiet clerk",
         "a tired farmer", "the small girl", "the baker", "an honest judge", "the red fox",
         "the captain", "a wandering poet"]
_VERB = ["walked to", "looked at", "dreamed of", "wrote about", "sang of", "ran past",
         "carried", "painted", "forgot", "remembered", "mended", "counted"]
_OBJ = ["the river", "a wooden boat", "the north road", "an empty house", "the market square",
        "a field of barley", "the lighthouse", "seven silver coins", "the winter sea",
        "a letter from home", "the long hill", "the broken bell"]
_TIME = ["in the morning", "at dusk", "before the rain", "after supper", "all night",
         "on sunday", "when the bells rang", "while the town slept"]
_JOIN = [", and then", "; later", ", but", ", so", ". then"]


def synth_text(n_bytes, seed):
    rng = np.random.default_rng(seed)
    out, size = [], 0
    while size < n_bytes:
        parts = []
        for k in range(int(rng.integers(1, 3)) + 1):
            clause = f"{_SUBJ[rng.integers(len(_SUBJ))]} {_VERB[rng.integers(len(_VERB))]} " \
                     f"{_OBJ[rng.integers(len(_OBJ))]}"
            if rng.random() < 0.5:
                clause += " " + _TIME[rng.integers(len(_TIME))]
            parts.append(clause if k == 0 else _JOIN[rng.integers(len(_JOIN))] + " " + clause)
        s = "".join(parts)
        s = s[0].upper() + s[1:] + ".\n" if rng.random() < 0.2 else s[0].upper() + s[1:] + ". "
        out.append(s)
        size += len(s)
    return "".join(out)[:n_bytes]


def write_llmc_bin(path, tokens):
    """llm.c layout: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def make_corpus(path, n_tokens=50000, seed=7):
    text = synth_text(n_tokens, seed)
    toks = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.uint16)
    write_llmc_bin(path, toks)
    print(f"{path}: {len(toks)} byte-level tokens, {os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--example", action="store_true",
                    help="write examples/gpt_tiny.onnx (+ .npz/.json) and examples/tiny_corpus.bin")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    if torch is None:
        sys.exit("export_test_models: needs torch (pip install torch)")
    torch.use_deterministic_algorithms(True)
    if args.example:
        out = args.out_dir or EXAMPLES_DIR
        os.makedirs(out, exist_ok=True)
        # No .npz for the example: its weights are the seeded init (build_model)
        # and live in the .onnx; a second 3.7 MB copy is not worth committing.
        export_family("gpt_tiny", EXAMPLE, out, (17,), stem="gpt_tiny", weights=False)
        make_corpus(os.path.join(out, "tiny_corpus.bin"))
        return
    out = args.out_dir or MODELS_DIR
    os.makedirs(out, exist_ok=True)
    for name, cfg in CONFIGS.items():
        export_family(name, cfg, out, OPSETS)


if __name__ == "__main__":
    main()
