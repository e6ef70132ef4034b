#!/usr/bin/env python3
"""Host training throughput: `hetc train` vs PyTorch CPU on the same model.

    python3 bench/train_host/run.py --hetc build/hetc                 # both models
    python3 bench/train_host/run.py --hetc build/hetc --models tiny   # just the example

A developer benchmark (needs torch; CI never runs it).  For each model it
trains the SAME weights on the SAME token batches with the same optimizer
(AdamW, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on rank >= 2 parameters,
global-norm clip 1.0, constant lr — hetc train's defaults), fp32, and prints
tokens/s of both and the ratio hetc/PyTorch.  Runs alternate (hetc, torch,
hetc, torch, ...) and the median over rounds is reported, so a noisy
neighbour on a shared machine hits both sides.  Steps 1 and 2 of every run
are warm-up (first-touch allocation, BLAS thread start) and not timed.

Models:
  tiny   examples/gpt_tiny.onnx (config examples/gpt_tiny.json), tokens
         examples/tiny_corpus.bin; torch gets the ONNX's own initializers
         (mapped back through the config's "initializers" table).
  gpt2   GPT-2-124M shape (vocab 50257, 12 layers, hidden 768, 12 heads,
         ffn 3072), built by tools/export_test_models.build_model and
         exported with its export_onnx to a temp dir; random tokens < vocab
         in an llm.c-format file (tools/export_test_models.write_llmc_bin).

Sanity check (exit status 1 if it fails): hetc's step-1 loss equals torch's
step-1 loss on the same batch within 1e-3 relative.  Batching is llm.c's:
step k reads B*T+1 tokens at offset k*B*T; inputs are the first B*T,
targets the last B*T.

Only wall time of the training steps is compared (hetc's graph build and
torch's model construction are excluded; hetc's setup is printed apart).
"""
import argparse
import copy
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import export_test_models as etm  # noqa: E402  (build_model, export_onnx, write_llmc_bin)

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("bench/train_host: needs torch (pip install torch)")

# hetc train's defaults (driver/cmd_train.c, docs/TRAINING.md); torch is
# configured to match them exactly.
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0

GPT2_124M = dict(family="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
                 n_kv_head=12, ffn=3072, seq=256, batch=4, eps=1e-5, init_std=0.02, seed=124)

STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \| grad norm (\S+) \| lr \S+ \| (\S+) tok/s")


def read_llmc_tokens(path):
    """llm.c token file: 256 int32 header (magic 20240520, version, count), uint16 ids."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if header[0] != 20240520:
            sys.exit(f"{path}: not an llm.c token file (magic {header[0]})")
        toks = np.frombuffer(f.read(), dtype=np.uint16)
    return toks[: int(header[2])].astype(np.int64)


def batch_at(tokens, step, B, T):
    """llm.c's loader: step k reads B*T+1 tokens at offset k*B*T (wrapping like
    hetc's loader: microbatch index modulo the number of whole microbatches)."""
    nb = (len(tokens) - 1) // (B * T)
    off = (step % nb) * B * T
    buf = torch.from_numpy(tokens[off: off + B * T + 1].copy())
    return buf[:-1].view(B, T), buf[1:].view(B, T)


def load_onnx_weights(model, onnx_path, init_map):
    """Copy the ONNX's initializers into the torch module by the exporter's
    name map (transposed Linear weights transposed back), so torch starts from
    exactly the weights hetc reads."""
    import onnx
    from onnx import numpy_helper
    sd = model.state_dict()
    seen = set()
    for init in onnx.load(onnx_path).graph.initializer:
        hit = init_map.get(init.name)
        if not hit or hit["param"] in seen:
            continue
        a = numpy_helper.to_array(init)
        if hit["transposed"]:
            a = a.T
        sd[hit["param"]].copy_(torch.from_numpy(np.array(a, dtype=np.float32, copy=True)))
        seen.add(hit["param"])
    missing = [k for k, v in model.named_parameters() if k not in seen]
    if missing:
        sys.exit(f"{onnx_path}: no initializer for torch parameters {missing}")


def make_optimizer(model):
    # Decoupled weight decay on rank >= 2 parameters only, as hetc's optimizer
    # pass (and nanoGPT/llm.c) configure it.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": other, "weight_decay": 0.0}],
                             lr=LR, betas=BETAS, eps=EPS)


def run_torch(model0, tokens, B, T, steps):
    """Train a fresh copy of model0 for `steps` steps; per-step seconds and losses."""
    model = copy.deepcopy(model0).train()
    opt = make_optimizer(model)
    times, losses = [], []
    for k in range(steps):
        t0 = time.perf_counter()
        x, y = batch_at(tokens, k, B, T)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        lv = loss.item()
        times.append(time.perf_counter() - t0)
        losses.append(lv)
    del model, opt
    return times, losses


def run_hetc(hetc, onnx_path, data, B, T, steps, out_dir):
    cmd = [hetc, "train", onnx_path, "--data", data, "--steps", str(steps), "--microbatch", str(B),
           "--seq", str(T), "--no-checkpoint", "-o", out_dir]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"hetc train failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    times, losses = [], []
    for line in p.stdout.splitlines():
        m = STEP_RE.match(line)
        if m:
            tok_s = float(m.group(5))
            times.append(B * T / tok_s if tok_s > 0 else float("nan"))
            losses.append(float(m.group(3)))
    if len(times) != steps:
        sys.exit(f"hetc train printed {len(times)} step lines, expected {steps}:\n{p.stdout}")
    return times, losses, wall


def tok_per_s(times, B, T, warmup):
    t = times[warmup:]
    return len(t) * B * T / sum(t)


def bench_case(name, hetc, onnx_path, data, model0, B, T, steps, rounds, warmup, work):
    tokens = read_llmc_tokens(data)
    h_tps, t_tps, setups = [], [], []
    h_loss1 = t_loss1 = None
    h_last = t_last = None
    for r in range(rounds):
        ht, hl, wall = run_hetc(hetc, onnx_path, data, B, T, steps, os.path.join(work, "hetc_out"))
        h_tps.append(tok_per_s(ht, B, T, warmup))
        setups.append(wall - sum(ht))
        tt, tl = run_torch(model0, tokens, B, T, steps)
        t_tps.append(tok_per_s(tt, B, T, warmup))
        h_loss1, t_loss1, h_last, t_last = hl[0], tl[0], hl[-1], tl[-1]
        print(f"  [{name}] round {r + 1}/{rounds}: hetc {h_tps[-1]:9.1f} tok/s "
              f"({1e3 * statistics.median(ht[warmup:]):.0f} ms/step), torch {t_tps[-1]:9.1f} tok/s "
              f"({1e3 * statistics.median(tt[warmup:]):.0f} ms/step)", flush=True)
    hm, tm = statistics.median(h_tps), statistics.median(t_tps)
    rel = abs(h_loss1 - t_loss1) / abs(t_loss1)
    ok = rel <= 1e-3
    print(f"{name}: B={B} T={T} steps={steps} (first {warmup} untimed) rounds={rounds}; "
          f"load average now {os.getloadavg()[0]:.2f} (other users of the machine)")
    print(f"  hetc   {hm:10.1f} tok/s (median; rounds {', '.join(f'{v:.1f}' for v in h_tps)}); "
          f"setup (import+passes+graph build) ~{statistics.median(setups):.2f} s")
    print(f"  torch  {tm:10.1f} tok/s (median; rounds {', '.join(f'{v:.1f}' for v in t_tps)})")
    print(f"  ratio hetc/torch = {hm / tm:.3f}")
    print(f"  step-1 loss: hetc {h_loss1:.7f} torch {t_loss1:.7f} rel diff {rel:.2e} "
          f"{'OK' if ok else 'FAIL (> 1e-3)'}; step-{steps} loss: hetc {h_last:.5f} torch {t_last:.5f}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetc", default=os.path.join(ROOT, "build", "hetc"))
    ap.add_argument("--models", default="tiny,gpt2", help="comma list of tiny, gpt2")
    ap.add_argument("--rounds", type=int, default=3, help="alternating hetc/torch rounds per model")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: 12 tiny, 5 gpt2)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed leading steps of each run")
    ap.add_argument("--tiny-batch", default="4x64", help="BxT for tiny")
    ap.add_argument("--gpt2-batch", default="4x256", help="BxT for gpt2")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    ap.add_argument("--keep", default=None, help="work directory to keep (default: a temp dir)")
    args = ap.parse_args()

    if not os.access(args.hetc, os.X_OK):
        sys.exit(f"bench/train_host: no hetc at {args.hetc} (pass --hetc)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    blas_env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_"))}
    print(f"hetc {args.hetc}; torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"{os.cpu_count()} cores; BLAS env {blas_env or 'none set'}")

    work = args.keep or tempfile.mkdtemp(prefix="hetc_train_bench_")
    os.makedirs(work, exist_ok=True)
    ok = True
    for name in args.models.split(","):
        if name == "tiny":
            B, T = map(int, args.tiny_batch.split("x"))
            onnx_path = os.path.join(ROOT, "examples", "gpt_tiny.onnx")
            with open(os.path.join(ROOT, "examples", "gpt_tiny.json")) as f:
                cfg = json.load(f)
            if T > cfg["seq"]:
                sys.exit(f"tiny: --tiny-batch seq {T} > the model's {cfg['seq']} positions")
            model0 = etm.build_model(cfg)
            load_onnx_weights(model0, onnx_path, cfg["initializers"]["gpt_tiny.onnx"])
            data = os.path.join(ROOT, "examples", "tiny_corpus.bin")
            steps = args.steps or 12
        elif name == "gpt2":
            B, T = map(int, args.gpt2_batch.split("x"))
            steps = args.steps or 5
            cfg = dict(GPT2_124M, seq=T, batch=B)
            model0 = etm.build_model(cfg).eval()
            onnx_path = os.path.join(work, "gpt2_124m.onnx")
            data = os.path.join(work, "gpt2_124m_tokens.bin")
            if not os.path.exists(onnx_path):
                t0 = time.perf_counter()
                etm.export_onnx(model0, cfg, onnx_path, 17)
                print(f"gpt2: exported {onnx_path} ({os.path.getsize(onnx_path) / 1e6:.0f} MB, "
                      f"{sum(p.numel() for p in model0.parameters()) / 1e6:.1f} M parameters) "
                      f"in {time.perf_counter() - t0:.1f} s", flush=True)
            if not os.path.exists(data):
                rng = np.random.default_rng(124)
                etm.write_llmc_bin(data, rng.integers(0, cfg["vocab_size"], size=(steps + 1) * B * T + 1))
        else:
            sys.exit(f"bench/train_host: unknown model {name!r}")
        ok &= bench_case(name, args.hetc, onnx_path, data, model0, B, T, steps, args.rounds,
                         args.warmup, work)
    if not args.keep:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
