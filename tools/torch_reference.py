#!/usr/bin/env python3
"""Training references for the committed test models, computed with torch.

For each tests/models/<name>.json (config) + <name>.npz (weights, keyed by
the torch state_dict names), using the model's own torch code from
tools/export_test_models.py, write tests/models/<name>.train_ref.npz with:

  inputs, targets   int32 [steps, B, T]  the batches used: llm.c batching of
                    examples/tiny_corpus.bin (regenerated with the exporter's
                    deterministic make_corpus when the file is absent; a
                    fixed random token array if neither exists), B and T
                    from the config; stored, so tests need no data file
  loss              float64 []           next-token cross entropy (mean over
                    B*T tokens) of the initial weights on batch 0
  grad/<param>      float32              d loss / d param on batch 0, one per
                    named parameter (tied weights appear once, under the
                    name torch's named_parameters() gives them; the sum of
                    both uses)
  grad_use/<key>    float32              for tied parameters only: the
                    gradient of each use alone (state_dict key per use,
                    e.g. wte.weight and lm_head.weight); see per_use_grads
  traj_loss         float64 [steps]      loss before each AdamW step k, on batch k
  traj_grad_norm    float64 [steps]      global grad norm before clipping
  traj_lr           float64 [steps]
  hparams           JSON string          everything needed to reproduce, the
                    tied groups, and onnx_params: per exported .onnx file,
                    initializer name -> [state_dict key, transposed?]

Trajectory: torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.95), eps=1e-8), weight
decay 0.1 on parameters with >= 2 dims only (matrices and embeddings: the
nanoGPT / llm.c rule, and hetc's optimizer default "no decay on norms and
biases"), torch.nn.utils.clip_grad_norm_(max_norm=1.0) before every step,
constant lr.  Step k: zero grads, loss on batch k, backward, clip, step.

Computed in float64 by default (--dtype float32 to see fp32 noise), so the
references are the exact values hetc's fp32 must approach to 1e-4.

--autocast-bf16 writes <name>.bf16_ref.npz instead: the same AdamW
trajectory (--steps, default 20 there) in float32 master weights with the
forward under torch.autocast("cpu", dtype=torch.bfloat16) -- the reference
of hetc train --precision bf16-mixed (tests/train test_train_bf16.py):
inputs, targets, traj_loss, traj_grad_norm, traj_lr, hparams, and
loss_linear_bf16: batch 0's loss with hetc's own cast placement emulated in
fp32 (only the Linears' operands and outputs rounded to bf16; see
linear_bf16_loss).

Needs torch; run by developers, not CI:
    python3 tools/torch_reference.py            # every model in tests/models
    python3 tools/torch_reference.py gpt2       # just one
"""
import argparse
import glob
import importlib.util
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def load_exporter(path):
    if not os.path.exists(path):
        sys.exit(f"torch_reference: {path} not found (it defines the test models' torch code)")
    spec = importlib.util.spec_from_file_location("export_test_models", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["export_test_models"] = mod
    spec.loader.exec_module(mod)  # the exporter runs its export only under __main__
    return mod


def build_model(mod, config):
    """The exporter's own constructor for this config (the model's torch code)."""
    if not hasattr(mod, "build_model"):
        sys.exit("torch_reference: tools/export_test_models.py has no build_model(config)")
    return mod.build_model(config)


def load_weights(model, npz_path, torch):
    w = np.load(npz_path)
    sd = model.state_dict()
    missing = [k for k in sd if k not in w.files]
    if missing:
        sys.exit(f"torch_reference: {npz_path} lacks state_dict entries {missing[:5]}...")
    model.load_state_dict({k: torch.from_numpy(np.array(w[k])) for k in sd}, strict=True)


def token_stream(vocab, need, corpus, mod):
    if corpus and not os.path.exists(corpus) and hasattr(mod, "make_corpus"):
        # examples/tiny_corpus.bin not generated yet: the exporter's
        # make_corpus is deterministic, so build the same file in a temp dir.
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            tmp = os.path.join(d, "tiny_corpus.bin")
            mod.make_corpus(tmp)
            toks, _ = token_stream(vocab, need, tmp, None)
        return toks, "export_test_models.make_corpus() (= examples/tiny_corpus.bin)"
    if corpus and os.path.exists(corpus):
        raw = np.fromfile(corpus, dtype=np.uint8)
        head = raw[:1024].view(np.int32) if raw.size >= 1024 else np.zeros(3, np.int32)
        if head[0] == 20240520:  # llm.c layout; see runtime/data_loader.h
            toks = raw[1024:].view(np.uint16)[: head[2]]
        else:
            toks = raw.view(np.uint16)
        if toks.max() >= vocab:
            sys.exit(f"torch_reference: {corpus} has token ids >= the model vocab {vocab}")
        return toks.astype(np.int64), os.path.relpath(corpus, ROOT)
    rng = np.random.default_rng(20240520)
    return rng.integers(0, vocab, size=need).astype(np.int64), "random(seed=20240520)"


def llmc_batches(toks, steps, B, T):
    """llm.c's loader: step k reads B*T+1 tokens at (k mod n) * B*T."""
    n = (len(toks) - 1) // (B * T)
    if n < 1:
        sys.exit(f"torch_reference: {len(toks)} tokens are too few for a {B}x{T} batch")
    xs, ys = [], []
    for k in range(steps):
        off = (k % n) * B * T
        buf = toks[off: off + B * T + 1]
        xs.append(buf[:-1].reshape(B, T))
        ys.append(buf[1:].reshape(B, T))
    return np.stack(xs), np.stack(ys)


def tied_groups(model):
    """state_dict keys that alias one parameter: [[kept_name, alias...], ...]."""
    import torch
    by_ptr = {}
    for k, v in model.state_dict(keep_vars=True).items():
        if isinstance(v, torch.nn.Parameter):
            by_ptr.setdefault(v.data_ptr(), []).append(k)
    named = {n for n, _ in model.named_parameters()}
    groups = []
    for keys in by_ptr.values():
        if len(keys) > 1:
            keys.sort(key=lambda k: k not in named)  # the named_parameters() name first
            groups.append(keys)
    return groups


def per_use_grads(model, loss_on, torch):
    """For tied parameters (GPT-2's wte / lm_head): the gradient of each use
    alone, from a copy of the model with the tie cut (each alias its own
    Parameter holding the same values).  The tied gradient is their sum.
    The TorchScript ONNX export does not keep the tie (the head becomes its
    own transposed initializer), so a trainer that does not re-tie them
    sees exactly these per-use gradients."""
    import copy
    out = {}
    for keys in tied_groups(model):
        m2 = copy.deepcopy(model)
        for k in keys[1:]:
            *path, leaf = k.split(".")
            mod = m2
            for part in path:
                mod = getattr(mod, part)
            setattr(mod, leaf, torch.nn.Parameter(getattr(mod, leaf).detach().clone()))
        m2.zero_grad(set_to_none=True)
        loss_on(0, m2).backward()
        sd = m2.state_dict(keep_vars=True)
        for k in keys:
            out["grad_use/" + k] = sd[k].grad.detach().to(torch.float32).numpy()
    return out


def onnx_param_map(config, models_dir, model, torch):
    """For each exported .onnx: initializer name -> [torch state_dict key,
    transposed?], matched by value (the TorchScript exporter renames folded,
    transposed Linear weights to onnx::MatMul_N)."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        return {}
    sd = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()
          if v.is_floating_point()}
    result = {}
    for fname in config.get("onnx", []):
        path = os.path.join(models_dir, fname)
        if not os.path.exists(path):
            continue
        m, table = onnx.load(path), {}
        for init in m.graph.initializer:
            arr = numpy_helper.to_array(init)
            if arr.dtype != np.float32:
                continue
            hit = None
            for k, v in sd.items():
                if k == init.name and v.shape == arr.shape and np.array_equal(v, arr):
                    hit = [k, False]
                    break
            if hit is None:
                # a tied weight matches several keys: prefer the alias that
                # is not already an initializer of its own in this file
                names = {i.name for i in m.graph.initializer}
                for k, v in sorted(sd.items(), key=lambda kv: kv[0] in names):
                    if v.shape == arr.shape and np.array_equal(v, arr):
                        hit = [k, False]
                        break
                    if v.ndim == 2 and v.T.shape == arr.shape and np.array_equal(v.T, arr):
                        hit = [k, True]
                        break
            if hit is not None:
                table[init.name] = hit
        result[fname] = table
    return result


def logits_of(model, x):
    out = model(x)
    if isinstance(out, (tuple, list)):
        out = out[0]
    if hasattr(out, "logits"):
        out = out.logits
    return out


def linear_bf16_loss(loss_on, torch):
    """Batch 0's loss of the initial weights with hetc's bf16-mixed cast
    placement emulated in fp32 (passes/mixed_precision.c): every F.linear's
    operands rounded to bf16, an fp32 GEMM (fp32 accumulation), its output
    rounded to bf16 and widened; everything else fp32.  torch.autocast
    rounds more (attention's matmuls, and elementwise ops on the bf16
    Linear outputs run in bf16), so on a model whose bf16 effect is small
    the two can even move the loss from fp32's in opposite directions; this
    value is the step-1 oracle of hetc's own roundings."""
    F = torch.nn.functional
    orig, calls = F.linear, [0]

    def rnd(t):
        return None if t is None else t.to(torch.bfloat16).float()

    def lin(x, w, b=None):
        calls[0] += 1
        return orig(rnd(x), rnd(w), rnd(b)).to(torch.bfloat16).float()

    F.linear = lin  # torch.nn.Linear calls F.linear through this module
    try:
        with torch.no_grad():
            loss = loss_on(0, autocast=False).item()
    finally:
        F.linear = orig
    if not calls[0]:
        sys.exit("torch_reference: the model calls no F.linear; no linear_bf16 loss")
    return loss


def reference(name, args, mod, torch):
    cfg_path = os.path.join(args.models_dir, name + ".json")
    with open(cfg_path) as f:
        config = json.load(f)
    dtype = torch.float64 if args.dtype == "float64" and not args.autocast_bf16 else torch.float32
    torch.manual_seed(0)
    model = build_model(mod, config)
    load_weights(model, os.path.join(args.models_dir, name + ".npz"), torch)
    model = model.to(dtype)
    model.train()  # the test models have no dropout; train() only for clarity
    onnx_map = onnx_param_map(config, args.models_dir, model, torch)
    vocab = int(config["vocab_size"])
    T = args.seq or int(config["seq"])
    B = args.batch or int(config.get("batch", 2))
    toks, source = token_stream(vocab, args.steps * B * T + 1, args.corpus, mod)
    xs, ys = llmc_batches(toks, args.steps, B, T)
    ce = torch.nn.functional.cross_entropy

    def loss_on(k, m=None, autocast=True):
        x = torch.from_numpy(xs[k])
        y = torch.from_numpy(ys[k])
        if args.autocast_bf16 and autocast:  # fp32 master weights, bf16 autocast of the forward
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lg = logits_of(m if m is not None else model, x)
            lg = lg.float()
        else:
            lg = logits_of(m if m is not None else model, x)
        return ce(lg.reshape(-1, lg.shape[-1]).to(dtype), y.reshape(-1))

    params = list(model.named_parameters())
    out = {"inputs": xs.astype(np.int32), "targets": ys.astype(np.int32)}
    if args.autocast_bf16:
        out["loss_linear_bf16"] = np.array(linear_bf16_loss(loss_on, torch), np.float64)
    if not args.autocast_bf16:
        out.update(per_use_grads(model, loss_on, torch))
        model.zero_grad(set_to_none=True)
        loss = loss_on(0)
        loss.backward()
        out["loss"] = np.array(loss.item(), np.float64)
        for pname, p in params:
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            out["grad/" + pname] = g.detach().to(torch.float32).numpy()

    decay = [p for _, p in params if p.dim() >= 2]
    no_decay = [p for _, p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses, norms, lrs = [], [], []
    for k in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_on(k)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], CLIP)
        losses.append(loss.item())
        norms.append(float(norm))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
    out["traj_loss"] = np.array(losses, np.float64)
    out["traj_grad_norm"] = np.array(norms, np.float64)
    out["traj_lr"] = np.array(lrs, np.float64)
    hp = {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WD,
          "weight_decay_rule": "params with ndim >= 2", "clip": CLIP, "lr_schedule": "constant",
          "batch": B, "seq": T, "steps": args.steps, "batching": "llm.c", "data": source,
          "dtype": "float32 + autocast bfloat16" if args.autocast_bf16 else args.dtype,
          "torch": torch.__version__,
          "decayed": [n for n, p in params if p.dim() >= 2],
          "not_decayed": [n for n, p in params if p.dim() < 2]}
    hp["tied"] = tied_groups(model)
    # computed from the initial weights (model was updated by the steps above)
    hp["onnx_params"] = onnx_map
    out["hparams"] = np.array(json.dumps(hp))
    dst = os.path.join(args.models_dir,
                       name + (".bf16_ref.npz" if args.autocast_bf16 else ".train_ref.npz"))
    np.savez_compressed(dst, **out)
    print(f"{dst}: loss {losses[0]:.6f}, {len(params)} params, "
          f"trajectory {losses[0]:.4f} -> {losses[-1]:.4f} ({os.path.getsize(dst)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="model names (default: every config in --models-dir)")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "tests", "models"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "examples", "tiny_corpus.bin"))
    ap.add_argument("--exporter", default=os.path.join(ROOT, "tools", "export_test_models.py"),
                    help="module with the models' torch code and build_model(config)")
    ap.add_argument("--batch", type=int, default=0, help="default: the config's batch")
    ap.add_argument("--seq", type=int, default=0, help="default: the config's sequence length")
    ap.add_argument("--steps", type=int, default=0, help="default 10 (20 with --autocast-bf16)")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="write <name>.bf16_ref.npz: fp32 master weights, bf16 autocast")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args()
    args.steps = args.steps or (20 if args.autocast_bf16 else 10)
    import torch
    torch.use_deterministic_algorithms(True)
    mod = load_exporter(args.exporter)
    names = args.models or sorted(
        os.path.basename(p)[:-5] for p in glob.glob(os.path.join(args.models_dir, "*.json"))
        if os.path.exists(p[:-5] + ".npz"))
    if not names:
        sys.exit(f"torch_reference: no <model>.json + <model>.npz in {args.models_dir}")
    for n in names:
        reference(n, args, mod, torch)


if __name__ == "__main__":
    main()
