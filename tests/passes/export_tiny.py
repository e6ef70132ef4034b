"""Tiny GPT-2-style and LLaMA-style models exported with torch.onnx (the
TorchScript exporter), so canonicalize is tested on the spellings a real
exporter writes: decomposed LayerNorm (opset < 17), erf and tanh Gelu,
nanoGPT's masked_fill attention with a float mask buffer, LLaMA's RMSNorm
with casts, SwiGLU (x * sigmoid(x)), and torch SDPA with is_causal."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = 1e-6

    def forward(self, x):
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attn(nn.Module):
    """style "hf" spells attention as Hugging Face's GPT-2 (bool mask buffer,
    torch.where with finfo.min, division by a full() scalar) and LLaMA
    (rotary embedding, grouped-query heads repeated with expand/reshape, an
    additive causal mask built with masked_fill, softmax in float32)."""

    def __init__(self, d, h, t, llama, style="plain"):
        super().__init__()
        self.h, self.llama, self.style = h, llama, style
        self.kvh = h // 2 if (llama and style == "hf") else h
        hd = d // h
        self.q = nn.Linear(d, d, bias=not llama)
        self.kv = nn.Linear(d, 2 * self.kvh * hd, bias=not llama)
        self.proj = nn.Linear(d, d, bias=not llama)
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))
        self.register_buffer("cbias", torch.tril(torch.ones(t, t, dtype=torch.bool)).view(1, 1, t, t))
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.h
        q = self.q(x).view(b, t, self.h, hd).transpose(1, 2)
        k, v = self.kv(x).split(self.kvh * hd, dim=2)
        k = k.view(b, t, self.kvh, hd).transpose(1, 2)
        v = v.view(b, t, self.kvh, hd).transpose(1, 2)
        if self.style == "hf" and self.llama:
            cos, sin = self.cos[:t], self.sin[:t]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = self.h // self.kvh
            k = k[:, :, None].expand(b, self.kvh, rep, t, hd).reshape(b, self.h, t, hd)
            v = v[:, :, None].expand(b, self.kvh, rep, t, hd).reshape(b, self.h, t, hd)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
            mask = torch.full((t, t), torch.finfo(torch.float32).min)
            cond = torch.arange(t)
            mask = mask.masked_fill(cond < (cond + 1).view(t, 1), 0)
            att = att + mask[None, None]
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            y = torch.matmul(att, v)
        elif self.style == "hf":
            att = torch.matmul(q, k.transpose(-1, -2))
            att = att / torch.full([], v.size(-1) ** 0.5, dtype=att.dtype)
            mv = torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype)
            att = torch.where(self.cbias[:, :, :t, :t], att, mv)
            y = torch.matmul(F.softmax(att, dim=-1), v)
        elif self.llama:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d, h, t, llama, approx, style):
        super().__init__()
        self.llama, self.approx = llama, approx
        self.ln1 = RMSNorm(d) if llama else nn.LayerNorm(d)
        self.ln2 = RMSNorm(d) if llama else nn.LayerNorm(d)
        self.attn = Attn(d, h, t, llama, style)
        if llama:
            self.gate = nn.Linear(d, 4 * d, bias=False)
            self.up = nn.Linear(d, 4 * d, bias=False)
            self.down = nn.Linear(4 * d, d, bias=False)
        else:
            self.fc = nn.Linear(d, 4 * d)
            self.out = nn.Linear(4 * d, d)
        for p in self.parameters():  # distinct values: no deduplicated initializers
            nn.init.normal_(p, 0.0, 0.2) if p.dim() < 2 else None

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h = self.ln2(x)
        if self.llama:
            return x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x + self.out(F.gelu(self.fc(h), approximate=self.approx))


class TinyLM(nn.Module):
    def __init__(self, vocab=61, d=32, h=4, t=8, layers=2, llama=False, approx="none",
                 style="plain"):
        super().__init__()
        self.llama = llama
        self.wte = nn.Embedding(vocab, d)
        if not llama:
            self.wpe = nn.Embedding(t, d)
        self.blocks = nn.ModuleList([Block(d, h, t, llama, approx, style) for _ in range(layers)])
        self.lnf = RMSNorm(d) if llama else nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx)
        if not self.llama:
            x = x + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.lnf(x))


def export(path, kind, opset, approx="none", layers=2, vocab=61, t=8, style="plain"):
    torch.manual_seed(0)
    m = TinyLM(vocab=vocab, t=t, layers=layers, llama=(kind == "llama"), approx=approx,
               style=style).eval()
    idx = torch.randint(0, vocab, (2, t))
    torch.onnx.export(m, (idx,), path, opset_version=opset, dynamo=False, input_names=["idx"],
                      output_names=["logits"], dynamic_axes={"idx": {0: "batch"}})
    return vocab
