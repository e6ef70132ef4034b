#!/usr/bin/env python3
"""Issue 9: the tensor-parallel structure layer_intra_from_ir reads from the
canonical IR, checked against what Megatron's sharding of these
architectures is (independent of how the reader walks the graph) restricted
to what the stage binaries shard (passes/tp_shard.c): a GPT-2 block has 2
forward all-reduces (after attention-out and MLP-out, row-parallel) and 2
backward ones (at the inputs of QKV and of MLP-in, the column-parallel
groups: Q, K, V share one input); the embedding, LM head and loss are not
sharded (no vocabulary parallelism by default: replicated, no all-reduce, no
sharded share).  A LLaMA block shards the same way (2 + 2): its attention
with rotary embedding and GQA (k/v heads repeated) splits over the kv heads,
and its SwiGLU MLP's gate and up Linears form one column-parallel group.
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


def verify(name, d, per_block):
    mods = d["modules"]
    ls = d["layers"]
    inm = [l for l in ls if l["in_module"]]
    check(mods >= 2, f"{name}: modules found")
    check(sum(l["ar_fwd"] for l in inm) == per_block * mods, f"{name}: {per_block} forward "
          f"all-reduces per block, got {sum(l['ar_fwd'] for l in inm)} for {mods} blocks")
    check(sum(l["ar_bwd"] for l in inm) == per_block * mods,
          f"{name}: {per_block} backward all-reduces per block")
    for i, l in enumerate(ls):
        if not l["in_module"]:  # embedding, LM head, loss: replicated under TP
            check(l["ar_fwd"] == 0 and l["ar_bwd"] == 0 and l["tp_flops_frac"] == 0 and
                  l["tp_param_frac"] == 0 and l["tp_act_frac"] == 0,
                  f"{name}: layer {i + 1} outside the blocks is replicated: {l}")
        if not per_block:
            check(l["tp_flops_frac"] == 0 and l["tp_param_frac"] == 0,
                  f"{name}: layer {i + 1} nothing sharded")
    for i, l in enumerate(ls):
        for k in ("tp_flops_frac", "tp_param_frac", "tp_act_frac"):
            check(0 <= l[k] <= 1, f"{name}: layer {i + 1} {k} = {l[k]} in [0, 1]")
        if l["ar_fwd"] + l["ar_bwd"] and l["fwd"] > 0 and l["in_module"] and per_block:
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
    verify("gpt_tiny", run(gpt, 2, 16, layers), 2)
with tempfile.TemporaryDirectory() as tmp:
    m = os.path.join(tmp, "llama.onnx")
    subprocess.run([sys.executable, os.path.join(src, "tools", "gen_model.py"), "--family", "llama",
                    "--layers", "3", "--hidden", "64", "--ffn", "128", "--heads", "4", "--kv-heads", "2",
                    "--vocab", "96", "--seq", "16", "-o", m], check=True, capture_output=True)
    hidden_bytes["llama"] = 2 * 16 * 64 * 4
    verify("llama", run(m, 2, 16), 2)
print("intra_ir:", "FAIL" if fails else "ok")
sys.exit(1 if fails else 0)
