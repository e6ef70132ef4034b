#!/usr/bin/env python3
"""Export a Hugging Face causal LM for hetc, and the PyTorch references the
suite compares hetc with.

    # a local model directory (config.json + weights), or a model type with
    # tiny random weights; the exporter: torchscript | dynamo | both
    python3 tools/export_hf.py --model ./my-llama -o llama.onnx --exporter dynamo
    python3 tools/export_hf.py --family qwen2 -o qwen2.onnx

    # the suite's models: every family x {fresh, random} x {torchscript, dynamo,
    # optimum} (+ static-shape LLaMAs) into tests/hf/, with references from torch
    python3 tools/export_hf.py --test-models --optimum-python /path/venv/bin/python

    # only the optimum exports, the references kept as they are (only the
    # "exports" entry of each ref.npz's hparams changes)
    python3 tools/export_hf.py --test-models --exporters optimum --keep-refs

    # the bf16-mixed references (torch.autocast) of the models of the
    # existing ref.npz files: tests/hf/<family>_random.bf16_ref.npz
    python3 tools/export_hf.py --bf16-refs [--only gpt2,llama] [--inits random,fresh]

What is exported: `input_ids` int64 [batch, seq] -> `logits` float32
[batch, seq, vocab], `use_cache=False`, dims named `batch` and `seq` (the
names `hetc --batch/--seq` bind).  The two torch exporters:

  torchscript  torch.onnx.export(..., dynamo=False): the legacy tracer.
               Initializers that hold bit-identical values are merged (fresh
               LayerNorm ones, zero biases); Linear weights are stored
               transposed under generated names; buffers usually become
               Constant nodes.
  dynamo       torch.onnx.export(..., dynamo=True), torch's default since 2.9:
               torch.export + onnxscript.  Initializers keep the torch names;
               buffers (RoPE inv_freq) are initializers too.

and, with --test-models, a third:

  optimum      `optimum-cli export onnx --task text-generation` (optimum-onnx,
               TorchScript underneath), run by --optimum-python (default: env
               HETC_OPTIMUM_PYTHON; optimum is skipped with a note without
               one): optimum-onnx 0.1 needs transformers 4.57, which cannot
               share an environment with transformers 5.  This script saves
               the same model with save_pretrained, optimum exports that
               directory with its defaults (post-processing on; no KV cache:
               `text-generation`, not `-with-past`), and the file is kept
               only if onnxruntime reproduces torch's logits (<= 1e-4
               relative).  Inputs input_ids, attention_mask, position_ids
               (dims batch_size, sequence_length) -> logits.

With --test-models, for each family and weight set (`fresh`: the model as
`from_config` initialises it, so equal ones/zeros exercise the exporters'
deduplication; `random`: every parameter perturbed, no two equal) the file
tests/hf/<family>_<init>.ref.npz holds, computed by torch in float64:

  input_ids, logits        a fixed [2, 16] input and torch's logits
  param/<name>             model.named_parameters() (tied weights once)
  traj_loss, traj_grad_norm  5 AdamW steps (lr 1e-3, betas 0.9/0.95, eps
                           1e-8, weight decay 0.1 on rank >= 2, clip 1.0) on
                           llm.c batches of examples/tiny_corpus.bin (B 2, T 16)
  hparams                  JSON: the above, versions, the exports

and, with --bf16-refs, tests/hf/<family>_<init>.bf16_ref.npz (see
bf16_references): 20 AdamW steps of the same model, data and
hyper-parameters in float32 master weights with the forward under
torch.autocast("cpu", dtype=torch.bfloat16), and batch 0's loss with
hetc's own bf16 cast placement emulated (linear_bf16_loss).

Needs torch, transformers and onnxscript (not the suite: it reads the files).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_DIR = os.path.join(ROOT, "tests", "hf")
CORPUS = os.path.join(ROOT, "examples", "tiny_corpus.bin")

B, T, STEPS = 2, 16, 5
BF16_STEPS = 20
# linear_bf16_loss: values this close (relative) to a bf16 rounding midpoint
# may round either way in fp32 (a few ulps of 6e-8..1.2e-7); at most this
# many (the nearest) are listed
FLIP_REL, FLIP_MAX = 2.5e-7, 16
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
OPSET = 18

# Tiny configs: vocab 128 covers tiny_corpus.bin (ids < 122); d 32, 2 layers.
COMMON = dict(vocab_size=128, max_position_embeddings=64)
FAMILIES = {
    "gpt2": dict(model_type="gpt2", vocab_size=128, n_positions=64, n_embd=32, n_layer=2,
                 n_head=4),
    "llama": dict(model_type="llama", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **COMMON),
    "qwen2": dict(model_type="qwen2", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **COMMON),
    "qwen3": dict(model_type="qwen3", hidden_size=32, intermediate_size=64, head_dim=8,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **COMMON),
    "mistral": dict(model_type="mistral", hidden_size=32, intermediate_size=64,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    sliding_window=None, **COMMON),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=32, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.5, **COMMON),
    "opt": dict(model_type="opt", hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                num_attention_heads=4, word_embed_proj_dim=32, **COMMON),
    "phi": dict(model_type="phi", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, partial_rotary_factor=0.5, **COMMON),
    "phi3": dict(model_type="phi3", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, **COMMON),
    "gemma": dict(model_type="gemma", hidden_size=32, intermediate_size=64, head_dim=8,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, **COMMON),
    "gptj": dict(model_type="gptj", vocab_size=128, n_positions=64, n_embd=32, n_layer=2,
                 n_head=4, rotary_dim=4, n_inner=64),
    "bloom": dict(model_type="bloom", vocab_size=128, hidden_size=32, n_layer=2, n_head=4),
    "falcon": dict(model_type="falcon", hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, multi_query=True, new_decoder_architecture=False,
                   alibi=False, parallel_attn=True, bias=False, **COMMON),
}
SEEDS = {name: 1000 + i for i, name in enumerate(FAMILIES)}

import torch  # noqa: E402  (the configs above are readable without torch)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402  (the llm.c batching and tie groups of the other references)


class WithMaskInputs(torch.nn.Module):
    """optimum's text-generation signature: input_ids, attention_mask,
    position_ids -> logits (what `optimum-cli export onnx` writes)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=False).logits


class LogitsOnly(torch.nn.Module):
    """input_ids -> logits, no cache: the graph hetc trains."""

    def __init__(self, model, ones_mask=False):
        super().__init__()
        self.model = model
        self.ones_mask = ones_mask

    def forward(self, input_ids):
        if self.ones_mask:
            # transformers 5's packed-sequence check (torch.diff of the
            # position ids, taken when no attention_mask is given) has no
            # TorchScript symbolic; an all-ones mask is the usual way round.
            mask = torch.ones_like(input_ids)
            return self.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        return self.model(input_ids=input_ids, use_cache=False).logits


def build(family, seed, init):
    from transformers import AutoConfig, AutoModelForCausalLM
    kw = dict(FAMILIES[family])
    cfg = AutoConfig.for_model(kw.pop("model_type"), **kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)  # SDPA where the family has it
    model.eval()
    if init == "random":
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.add_(torch.randn(p.shape, generator=g) * (0.1 if p.dim() >= 2 else 0.05))
    return model.float()


def export(model, path, exporter, static=False):
    ids = torch.zeros(B, T, dtype=torch.int64)
    wrapped = LogitsOnly(model, ones_mask=exporter == "torchscript").eval()
    kw = dict(input_names=["input_ids"], output_names=["logits"], opset_version=OPSET)
    if exporter == "torchscript":
        if not static:
            kw["dynamic_axes"] = {"input_ids": {0: "batch", 1: "seq"},
                                  "logits": {0: "batch", 1: "seq"}}
        torch.onnx.export(wrapped, (ids,), path, dynamo=False, do_constant_folding=True, **kw)
    elif exporter == "dynamo":
        if not static:
            batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=64)
            kw["dynamic_shapes"] = {"input_ids": {0: batch, 1: seq}}
        prog = torch.onnx.export(wrapped, (ids,), dynamo=True, external_data=False, **kw)
        prog.save(path, external_data=False)
        # Node metadata (stack traces naming this script's paths, class
        # hierarchies, fx nodes) is most of a tiny model's file; the module
        # namespace stays.
        import onnx
        m = onnx.load(path)
        for n in m.graph.node:
            keep = [p for p in n.metadata_props if p.key == "namespace"]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
        onnx.save(m, path)
    else:
        sys.exit("export_hf: unknown exporter %r (torchscript, dynamo)" % exporter)


def export_mask_inputs(model, path):
    """The optimum signature, through the TorchScript exporter (which optimum
    drives), dims batch/seq symbolic."""
    ids = torch.zeros(B, T, dtype=torch.int64)
    mask = torch.ones(B, T, dtype=torch.int64)
    pos = torch.arange(T, dtype=torch.int64).expand(B, T)
    axes = {k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "position_ids",
                                                  "logits")}
    torch.onnx.export(WithMaskInputs(model).eval(), (ids, mask, pos), path, dynamo=False,
                      do_constant_folding=True, opset_version=OPSET,
                      input_names=["input_ids", "attention_mask", "position_ids"],
                      output_names=["logits"], dynamic_axes=axes)


def optimum_config_fixes(config_path):
    """Rewrite what transformers 5's save_pretrained writes and transformers
    4.57 reads differently; returns what was changed (for the record)."""
    with open(config_path) as fh:
        cfg = json.load(fh)
    fixes = []
    # transformers 5 keeps the rotary settings only in `rope_parameters`;
    # 4.57 reads them from top-level keys and, finding none, silently takes
    # its defaults (GPT-NeoX's rotary_pct 0.25 where the model has 0.5; a
    # real Qwen2's rope_theta 1e6 would become 10000).  Copy them up under
    # the names 4.57 reads; `rope_parameters` itself is left (4.57 ignores it).
    rope = cfg.get("rope_parameters") or {}
    names = {"rope_theta": ["rope_theta"], "partial_rotary_factor": ["partial_rotary_factor"]}
    if cfg.get("model_type") == "gpt_neox":
        names = {"rope_theta": ["rotary_emb_base"], "partial_rotary_factor": ["rotary_pct"]}
    for key, olds in names.items():
        for o in olds:
            if key in rope and o not in cfg:
                cfg[o] = rope[key]
                fixes.append("%s = rope_parameters.%s (%r)" % (o, key, rope[key]))
    if rope.get("rope_type", "default") != "default":
        raise RuntimeError("rope_type %r: no transformers 4.57 spelling known here"
                           % rope["rope_type"])
    if fixes:
        with open(config_path, "w") as fh:
            json.dump(cfg, fh, indent=2)
    return fixes


def optimum_versions(python):
    code = ("import importlib.metadata as m; print(' '.join(m.version(p) for p in "
            "('optimum-onnx', 'optimum', 'transformers', 'torch')))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                         env=optimum_env()).stdout.split()
    return dict(zip(("optimum-onnx", "optimum", "transformers", "torch"), out))


def optimum_env():
    env = dict(os.environ, HF_HUB_OFFLINE="1")  # a local directory: nothing to fetch
    env.pop("PYTHONPATH", None)
    return env


def export_optimum(model, path, python):
    """`optimum-cli export onnx --task text-generation` of this model, by the
    optimum environment's python; the directory it reads is this model's
    save_pretrained (same weights).  Returns the config fixes applied."""
    import onnx
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory(prefix="export_hf_optimum_") as tmp:
        src, out = os.path.join(tmp, "model"), os.path.join(tmp, "onnx")
        model.save_pretrained(src)
        fixes = optimum_config_fixes(os.path.join(src, "config.json"))
        cmd = [python, "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", src,
               "--task", "text-generation", out]
        p = subprocess.run(cmd, capture_output=True, text=True, env=optimum_env())
        if p.returncode:
            lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
            raise RuntimeError("optimum-cli exit %d: %s" % (p.returncode,
                                                           lines[-1] if lines else ""))
        src_onnx = os.path.join(out, "model.onnx")
        m = onnx.load(src_onnx)  # tiny models: no external data
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer):
            raise RuntimeError("optimum wrote external data")
        # as the dynamo exports: node metadata dropped but the namespace (the
        # TorchScript exporter underneath writes little; doc strings too)
        for n in m.graph.node:
            keep = [q for q in n.metadata_props if q.key == "namespace"]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
            n.doc_string = ""
        onnx.save(m, path)
    return fixes


def ort_vs_ref(path, ref):
    """onnxruntime's logits of the file on ref's input, each extra input of
    optimum's signature bound as hetc binds it (ones, arange): max |diff| /
    max |torch|."""
    import onnxruntime as ort
    x = ref["input_ids"].astype(np.int64)
    have = {"input_ids": x, "attention_mask": np.ones_like(x),
            "position_ids": np.broadcast_to(np.arange(x.shape[1], dtype=np.int64),
                                            x.shape).copy()}
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    missing = [n for n in names if n not in have]
    if missing:
        raise RuntimeError("inputs %s: no binding for %s" % (names, missing))
    got = s.run(["logits"], {n: have[n] for n in names})[0].astype(np.float64)
    want = ref["logits"].astype(np.float64)
    if got.shape != want.shape:
        raise RuntimeError("logits %s, torch %s" % (got.shape, want.shape))
    return float(np.abs(got - want).max() / np.abs(want).max())


def llmc_batches(steps):
    """llm.c batches of examples/tiny_corpus.bin, as tools/torch_reference.py reads them."""
    raw = np.fromfile(CORPUS, dtype=np.uint8)
    head = raw[:1024].view(np.int32)
    toks = raw[1024:].view(np.uint16)[: head[2]].astype(np.int64)
    return torch_reference.llmc_batches(toks, steps, B, T)


def trajectory(model, steps, dtype, autocast=False):
    """`steps` AdamW steps of a copy of `model` in `dtype` on the llm.c
    batches: (losses, pre-clip grad norms).  autocast: the forward under
    torch.autocast("cpu", dtype=torch.bfloat16) with the model's `dtype`
    (float32) weights as the master copy and the loss taken in float32 on
    the widened logits -- what tools/torch_reference.py --autocast-bf16 does
    for the committed models.  Step k: zero grads, loss on batch k,
    backward, clip, step."""
    import copy
    m = copy.deepcopy(model).to(dtype)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    other = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    xs, ys = llmc_batches(steps)
    # hetc trains without dropout, so the reference does too: GPT-2's and
    # OPT's configs default to 0.1, which train() would turn on (and make
    # the trajectory a random draw).  eval() only switches dropout off here:
    # these models have no batch-norm.
    m.eval()
    losses, norms = [], []
    for k in range(steps):
        opt.zero_grad(set_to_none=True)
        x = torch.from_numpy(xs[k])
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lg = m(input_ids=x, use_cache=False).logits
            lg = lg.to(dtype)
        else:
            lg = m(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]),
                                                 torch.from_numpy(ys[k]).reshape(-1))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)))
        losses.append(loss.item())
        opt.step()
    return np.array(losses, np.float64), np.array(norms, np.float64)


def references(model, family, init):
    """Logits, parameters and a 5-step AdamW trajectory, in float64."""
    import copy
    m = copy.deepcopy(model).double()
    rng = np.random.default_rng(20240520)
    x = rng.integers(0, FAMILIES[family].get("vocab_size", 128), size=(B, T)).astype(np.int64)
    with torch.no_grad():
        logits = m(input_ids=torch.from_numpy(x), use_cache=False).logits.float().numpy()
    out = {"input_ids": x, "logits": logits}
    for name, p in model.named_parameters():
        out["param/" + name] = p.detach().float().numpy()
    out["traj_loss"], out["traj_grad_norm"] = trajectory(model, STEPS, torch.float64)
    return out


def linear_bf16_loss(model):
    """Batch 0's loss with hetc's bf16-mixed cast placement emulated
    (passes/mixed_precision.c; tools/torch_reference.py linear_bf16_loss for
    the committed models): every layer that is one GEMM with a weight
    (nn.Linear and its subclasses such as FalconLinear, GPT-2's Conv1D) gets
    its input, weight and bias rounded to bf16 and its output rounded to
    bf16; everything else, and all arithmetic between the roundings, in
    float64 (in float32, torch's own GEMMs round one GPT-2 value the other
    way: 2.4e-4 on the loss).  torch.autocast rounds in more places (attention's matmuls,
    elementwise ops on bf16 values), so this, not the autocast trajectory,
    is the step-1 oracle of hetc's own roundings.

    An fp32 run computes the values it rounds with ~1e-7 relative error, so
    a value within that distance of a bf16 rounding midpoint may round the
    other way there (and a single flipped element of a 2 x 16 batch moves
    these models' loss by up to ~1e-4: measured on gemma, a down_proj input
    5.7e-8 from a midpoint).  So the activation values rounded here (each
    GEMM's input and output; weights and biases are the same fp32 numbers on
    both sides) that lie within FLIP_REL of a midpoint are listed, and the
    loss with each of them rounded the other way.

    Returns (emulated loss, plain loss without the roundings, GEMM layers,
    [(loss with one flip - emulated loss, relative distance), ...])."""
    import copy
    from transformers.pytorch_utils import Conv1D
    f64 = torch.float64
    m = copy.deepcopy(model).to(f64).eval()
    xs, ys = llmc_batches(1)

    def loss():
        with torch.no_grad():
            lg = m(input_ids=torch.from_numpy(xs[0]), use_cache=False).logits
            return torch.nn.functional.cross_entropy(
                lg.reshape(-1, lg.shape[-1]), torch.from_numpy(ys[0]).reshape(-1)).item()

    def rnd(t):
        return t.to(torch.bfloat16).to(f64)

    def other_side(v, r):
        """the bf16 neighbour of r = rnd(v) on v's side"""
        b = r.to(torch.bfloat16)
        return torch.nextafter(b, torch.where(v > r, torch.full_like(b, float("inf")),
                                              torch.full_like(b, float("-inf")))).to(f64)

    saved, seen, flip = {}, [], {}

    def rounded(key, t):
        r = rnd(t)
        if flip.get("key") == key:
            r = r.clone()
            i = flip["index"]
            r.reshape(-1)[i] = other_side(t.reshape(-1)[i], r.reshape(-1)[i])
        if flip.get("record"):
            seen.append((key, t.detach().reshape(-1).clone(), r.reshape(-1).clone()))
        return r

    def pre(mod, args):
        saved[mod] = [(p, p.data) for p in (mod.weight, getattr(mod, "bias", None))
                      if p is not None]
        for p, d in saved[mod]:
            p.data = rnd(d)
        return (rounded((id(mod), "in"), args[0]),) + tuple(args[1:])

    def post(mod, args, out):
        for p, d in saved.pop(mod):
            p.data = d
        return rounded((id(mod), "out"), out)

    plain = loss()
    layers = [mod for mod in m.modules() if isinstance(mod, (torch.nn.Linear, Conv1D))]
    hooks = [h for mod in layers for h in (mod.register_forward_pre_hook(pre),
                                           mod.register_forward_hook(post))]
    try:
        flip["record"] = True
        emu = loss()
        flip.clear()
        near = []
        for key, v, r in seen:
            mid = (r + other_side(v, r)) / 2
            d = (v - mid).abs() / v.abs().clamp_min(1e-30)
            for i in torch.nonzero(d < FLIP_REL).flatten().tolist():
                near.append((float(d[i]), key, i))
        flips = []
        for d, key, i in sorted(near)[:FLIP_MAX]:
            flip.update(key=key, index=i)
            flips.append((loss() - emu, d))
            flip.clear()
    finally:
        for h in hooks:
            h.remove()
    return emu, plain, len(layers), flips


def same_params(model, ref):
    """'' when the model's named_parameters are ref's param/<name> bit for
    bit (float32), else what differs: the weights a reference was made from."""
    mine = {n: p.detach().float().numpy() for n, p in model.named_parameters()}
    theirs = {k[6:]: ref[k] for k in ref if k.startswith("param/")}
    if sorted(mine) != sorted(theirs):
        return "parameters %s here, %s there" % (sorted(set(mine) - set(theirs))[:3],
                                                 sorted(set(theirs) - set(mine))[:3])
    for n, v in mine.items():
        if v.shape != theirs[n].shape or not np.array_equal(v, theirs[n]):
            return "%s differs" % n
    return ""


def bf16_references(families, inits):
    """tests/hf/<family>_<init>.bf16_ref.npz: the reference of `hetc train
    --precision bf16-mixed` (tests/hf/test_hf.py --bf16).  The model is the
    one of <family>_<init>.ref.npz (checked parameter by parameter), and
    this tool's float64 path must reproduce that file's 5-step trajectory
    (same batches, hyper-parameters and step order) to 1e-12 before the
    bf16 one is written:

      traj_loss, traj_grad_norm  BF16_STEPS steps, float32 master weights,
                                 the forward under torch.autocast("cpu",
                                 dtype=torch.bfloat16), loss in float32
      traj_loss_fp32             the same steps in plain float32 (how far
                                 torch's own fp32 is from its autocast)
      loss_linear_bf16           batch 0's loss with hetc's cast placement
                                 emulated (linear_bf16_loss, in float64),
      loss_fp32_step1            the same without the roundings, and
      loss_linear_bf16_flips     [n, 2]: the loss change when one value
                                 rounded there that lies within FLIP_REL of a
                                 bf16 midpoint rounds the other way, and
                                 its relative distance
      hparams                    JSON: as ref.npz's, steps BF16_STEPS, the
                                 dtype, and the float64 check's figure
    """
    import transformers
    for family in families:
        for init in inits:
            model = build(family, SEEDS[family], init)
            with np.load(os.path.join(HF_DIR, "%s_%s.ref.npz" % (family, init))) as z:
                ref = {k: z[k] for k in z.files}
            bad = same_params(model, ref)
            if bad:
                sys.exit("export_hf: %s %s: the model built now is not the one of the "
                         "references (%s)" % (family, init, bad))
            lo, gn = trajectory(model, STEPS, torch.float64)
            check = max(float(np.max(np.abs(lo - ref["traj_loss"]) / np.abs(ref["traj_loss"]))),
                        float(np.max(np.abs(gn - ref["traj_grad_norm"]) /
                                     np.abs(ref["traj_grad_norm"]))))
            if check > 1e-12:
                sys.exit("export_hf: %s %s: the float64 trajectory is %.2e from the committed "
                         "reference's: not the same data / hyper-parameters" % (family, init,
                                                                                 check))
            bl, bn = trajectory(model, BF16_STEPS, torch.float32, autocast=True)
            fl, _ = trajectory(model, BF16_STEPS, torch.float32)
            emu, plain, nlin, flips = linear_bf16_loss(model)
            if abs(plain - fl[0]) > 1e-6 * abs(fl[0]):  # float32's vs float64's
                sys.exit("export_hf: %s %s: the emulation's fp32 loss %.9g is not the "
                         "trajectory's %.9g" % (family, init, plain, fl[0]))
            hp = json.loads(str(ref["hparams"]))
            hp = {k: hp[k] for k in ("family", "init", "config", "seed", "batch", "seq", "lr",
                                     "betas", "eps", "weight_decay", "clip", "lr_schedule",
                                     "data", "tied")}
            hp.update(steps=BF16_STEPS, dtype="float32 + autocast bfloat16",
                      float64_vs_ref=check, torch=torch.__version__,
                      transformers=transformers.__version__)
            dst = os.path.join(HF_DIR, "%s_%s.bf16_ref.npz" % (family, init))
            hp.update(linear_bf16_layers=nlin, flip_rel=FLIP_REL)
            np.savez_compressed(dst, traj_loss=bl, traj_grad_norm=bn, traj_loss_fp32=fl,
                                loss_linear_bf16=np.array(emu, np.float64),
                                loss_fp32_step1=np.array(plain, np.float64),
                                loss_linear_bf16_flips=np.array(flips, np.float64).reshape(-1, 2),
                                hparams=np.array(json.dumps(hp)))
            rel = np.abs(fl - bl) / np.abs(bl)
            print("%-9s %-6s float64 vs ref.npz %.1e; autocast loss %.4f -> %.4f, torch fp32 vs "
                  "autocast mean %.2e max %.2e; step 1: autocast - fp32 %+.2e, %d Linears "
                  "emulated - fp32 %+.2e, %d values near a midpoint (largest flip %.1e)" % (family, init, check, bl[0], bl[-1], rel.mean(),
                                             rel.max(), bl[0] - fl[0], nlin, emu - plain, len(flips),
                                             max([abs(f) for f, _ in flips] or [0])))


def test_models(families, exporters, optimum_python=None, keep_refs=False):
    """tests/hf/: exports and references.  keep_refs: the references stay
    (the weights are checked to be the ones they were made from) and only
    the hparams "exports" entries of `exporters` change."""
    import transformers
    os.makedirs(HF_DIR, exist_ok=True)
    if "optimum" in exporters and not optimum_python:
        print("export_hf: no --optimum-python (or HETC_OPTIMUM_PYTHON): optimum exports skipped")
        exporters = [e for e in exporters if e != "optimum"]
    opt_versions = optimum_versions(optimum_python) if "optimum" in exporters else None
    for family in families:
        for init in ("fresh", "random"):
            model = build(family, SEEDS[family], init)
            npz = os.path.join(HF_DIR, "%s_%s.ref.npz" % (family, init))
            if keep_refs:
                with np.load(npz) as z:
                    ref = {k: z[k] for k in z.files}
                hp = json.loads(str(ref["hparams"]))
                bad = same_params(model, ref)
                if bad:
                    sys.exit("export_hf: %s: the model built now is not the one of the "
                             "references (%s): regenerate without --keep-refs" % (npz, bad))
                exports = hp["exports"]
            else:
                ref = references(model, family, init)
                exports = {}
            for ex in exporters:
                fname = "%s_%s_%s.onnx" % (family, init, ex)
                out = os.path.join(HF_DIR, fname)
                try:
                    if ex == "optimum":
                        fixes = export_optimum(model, out, optimum_python)
                        err = ort_vs_ref(out, ref)
                        if err > 1e-4:
                            os.remove(out)
                            raise RuntimeError("onnxruntime logits vs torch off by %.2e" % err)
                        print("  %s %s optimum: %d bytes, onnxruntime vs torch %.1e%s" % (
                            family, init, os.path.getsize(out), err,
                            "; config: " + ", ".join(fixes) if fixes else ""))
                    else:
                        export(model, out, ex)
                    exports[ex] = fname
                except Exception as e:  # an exporter that cannot export the family
                    exports[ex] = None
                    print("  %s %s %s: export failed: %s" % (family, init, ex,
                                                            str(e).splitlines()[0][:200]))
            if not keep_refs and family == "llama" and init == "random":
                # fixed [2, 16]: TorchScript keeps the tables as Constant
                # nodes, dynamo folds the mask and RoPE cos/sin into
                # float initializers (the buffers hetc must not train)
                fname = "llama_random_static.onnx"
                export(model, os.path.join(HF_DIR, fname), "torchscript", static=True)
                exports["static"] = fname
                fname = "llama_random_dynstatic.onnx"
                export(model, os.path.join(HF_DIR, fname), "dynamo", static=True)
                exports["dynstatic"] = fname
            if not keep_refs and family in ("llama", "gpt2") and init == "random":
                fname = "%s_random_maskinputs.onnx" % family
                export_mask_inputs(model, os.path.join(HF_DIR, fname))
                exports["maskinputs"] = fname
            # one order whichever way the file was written (--keep-refs adds
            # to what is there), so a full regeneration writes the same bytes
            order = ("torchscript", "dynamo", "static", "maskinputs", "optimum")
            exports = {k: exports[k] for k in sorted(exports, key=lambda k: (
                order.index(k) if k in order else len(order), k))}
            if keep_refs:
                hp["exports"] = exports
            else:
                hp = dict(family=family, init=init, config=FAMILIES[family], seed=SEEDS[family],
                          batch=B, seq=T, steps=STEPS, lr=LR, betas=list(BETAS), eps=EPS,
                          weight_decay=WD, clip=CLIP, lr_schedule="constant",
                          data="examples/tiny_corpus.bin", opset=OPSET, exports=exports,
                          tied=torch_reference.tied_groups(model),
                          torch=torch.__version__, transformers=transformers.__version__)
            if opt_versions:
                hp["optimum_env"] = opt_versions
            ref["hparams"] = np.array(json.dumps(hp))
            np.savez_compressed(npz, **ref)
            print("%-9s %-6s params %d, loss %.4f -> %.4f, exports %s" % (
                family, init, sum(1 for _ in model.parameters()), ref["traj_loss"][0],
                ref["traj_loss"][-1], ", ".join(k for k, v in exports.items() if v)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a local Hugging Face model directory")
    ap.add_argument("--family", choices=sorted(FAMILIES),
                    help="a tiny random-weight model of this family instead of --model")
    ap.add_argument("-o", "--output", help="the .onnx to write")
    ap.add_argument("--exporter", default="dynamo", choices=("dynamo", "torchscript"))
    ap.add_argument("--static", action="store_true",
                    help="fixed input shape [2, 16] (no symbolic dims)")
    ap.add_argument("--test-models", action="store_true",
                    help="write the suite's models and references into tests/hf/")
    ap.add_argument("--only", help="with --test-models: comma-separated families")
    ap.add_argument("--exporters", default="torchscript,dynamo,optimum",
                    help="with --test-models: comma-separated, of torchscript, dynamo, optimum")
    ap.add_argument("--keep-refs", action="store_true",
                    help="with --test-models: keep each ref.npz, change only the exports of "
                    "--exporters in its hparams")
    ap.add_argument("--optimum-python", default=os.environ.get("HETC_OPTIMUM_PYTHON"),
                    help="with --test-models: the python of an environment with optimum-onnx "
                    "(and the transformers it needs); default env HETC_OPTIMUM_PYTHON, "
                    "without either the optimum exports are skipped")
    ap.add_argument("--bf16-refs", action="store_true",
                    help="write tests/hf/<family>_<init>.bf16_ref.npz (torch.autocast bf16 "
                    "trajectories) for the models of the existing ref.npz files")
    ap.add_argument("--inits", default="random",
                    help="with --bf16-refs: comma-separated weight sets (fresh, random)")
    args = ap.parse_args()
    if args.bf16_refs:
        bf16_references(args.only.split(",") if args.only else list(FAMILIES),
                        args.inits.split(","))
        return
    if args.test_models:
        fams = args.only.split(",") if args.only else list(FAMILIES)
        exps = args.exporters.split(",")
        unknown = [e for e in exps if e not in ("torchscript", "dynamo", "optimum")]
        if unknown:
            ap.error("--exporters: unknown %s (torchscript, dynamo, optimum)" % unknown)
        test_models(fams, exps, args.optimum_python, args.keep_refs)
        return
    if not args.output or not (args.model or args.family):
        ap.error("give --model DIR or --family NAME, and -o FILE (or --test-models)")
    if args.model:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa")
        model = model.float().eval()
    else:
        model = build(args.family, SEEDS[args.family], "fresh")
    export(model, args.output, args.exporter, static=args.static)
    print("export_hf: wrote %s (%s exporter)" % (args.output, args.exporter))
    const = [n for n, p in model.named_parameters() if bool((p == p.flatten()[0]).all())]
    if args.exporter == "dynamo" and const:
        # onnxscript's optimizer folds an Add of a zero bias away and merges
        # equal LayerNorms: such parameters are then not in the file at all
        print("export_hf: warning: %d parameters hold one value each (%s, ...): the dynamo "
              "exporter's optimizer may remove them (zero biases, equal norms), so hetc could "
              "not train them; to train from this initialisation use --exporter torchscript"
              % (len(const), const[0]))


if __name__ == "__main__":
    main()
