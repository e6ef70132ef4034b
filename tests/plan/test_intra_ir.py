#!/usr/bin/env python3
"""Issue 9: the tensor-parallel structure layer_intra_from_ir reads from the
canonical IR, checked against what Megatron's sharding of these
architectures is (independent of how the reader walks the graph): a GPT-2 or
LLaMA block has 2 forward all-reduces (after attention-out and MLP-out,
row-parallel) and 2 backward ones (at the inputs of QKV and of MLP-in / gate+up,
the column-parallel groups: Q, K, V share one input, gate and up another);
each parameter Embedding is vocabulary-parallel (one forward all-reduce), the
LM head is column-parallel (one backward all-reduce).
usage: test_intra_ir.py INTRA_IR_TOOL SRC_DIR"""
import json
import os
import subprocess
import sys
import tempfile

tool, src = sys.argv[1], sys.argv[2]
fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg)


def run(model, batch, seq, layers=None):
    args = [tool, model, str(batch), str(seq)] + ([str(layers)] if layers else [])
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        print(p.stderr)
        sys.exit(1)
    return json.loads(p.stdout)


def verify(name, d):
    mods = d["modules"]
    ls = d["layers"]
    inm = [l for l in ls if l["in_module"]]
    check(mods >= 2, f"{name}: modules found")
    check(sum(l["ar_fwd"] for l in inm) == 2 * mods, f"{name}: 2 forward all-reduces per block, got "
          f"{sum(l['ar_fwd'] for l in inm)} for {mods} blocks")
    check(sum(l["ar_bwd"] for l in inm) == 2 * mods, f"{name}: 2 backward all-reduces per block")
    check(sum(l["ar_fwd"] for l in ls) == 2 * mods + d["embedding"],
          f"{name}: + one per vocabulary-parallel embedding")
    check(sum(l["ar_bwd"] for l in ls) == 2 * mods + 1, f"{name}: + the LM head's input gradient")
    for i, l in enumerate(ls):
        for k in ("tp_flops_frac", "tp_param_frac", "tp_act_frac"):
            check(0 <= l[k] <= 1, f"{name}: layer {i + 1} {k} = {l[k]} in [0, 1]")
        if l["ar_fwd"] + l["ar_bwd"] and l["fwd"] > 0 and l["in_module"]:
            # the GEMMs are nearly all of a block layer's FLOPs
            check(l["tp_flops_frac"] > 0.9, f"{name}: layer {i + 1} sharded FLOPs {l['tp_flops_frac']}")
        # fused Attention keeps q, k, v only: selective recompute drops nothing
        check(l["attn_bytes"] == 0, f"{name}: layer {i + 1} attention internals with a fused op")
        check(l["ar_fwd_bytes"] >= 0 and l["ar_bwd_bytes"] >= 0, f"{name}: bytes")
        if l["ar_fwd"] and l["in_module"]:
            # a row-parallel output is the block's boundary activation: hidden x tokens
            check(abs(l["ar_fwd_bytes"] / l["ar_fwd"] - hidden_bytes[name]) < 1e-9,
                  f"{name}: layer {i + 1} all-reduce of {l['ar_fwd_bytes']} B, expected "
                  f"{hidden_bytes[name]} per all-reduce")


hidden_bytes = {}
gpt = os.path.join(src, "examples", "gpt_tiny.onnx")
meta = json.load(open(os.path.join(src, "examples", "gpt_tiny.json")))
hidden_bytes["gpt_tiny"] = 2 * 16 * meta.get("hidden", meta.get("n_embd", 0)) * 4
for layers in (None, 6):
    verify("gpt_tiny", run(gpt, 2, 16, layers))
with tempfile.TemporaryDirectory() as tmp:
    m = os.path.join(tmp, "llama.onnx")
    subprocess.run([sys.executable, os.path.join(src, "tools", "gen_model.py"), "--family", "llama",
                    "--layers", "3", "--hidden", "64", "--ffn", "128", "--heads", "4", "--kv-heads", "2",
                    "--vocab", "96", "--seq", "16", "-o", m], check=True, capture_output=True)
    hidden_bytes["llama"] = 2 * 16 * 64 * 4
    verify("llama", run(m, 2, 16))
print("intra_ir:", "FAIL" if fails else "ok")
sys.exit(1 if fails else 0)
