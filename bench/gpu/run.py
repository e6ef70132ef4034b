#!/usr/bin/env python3
"""bench/gpu: GPT-2 124M training on one GPU, hetc's CUDA backend against
PyTorch eager and torch.compile, same model, weights, batches and optimizer,
in the same run (issue 7).  Needs torch with CUDA and a GPU; never run by CI.

    python3 bench/gpu/run.py --hetc build/hetc                     # B 8 x T 1024, 20 steps
    python3 bench/gpu/run.py --hetc build/hetc --batch 4 --steps 30 --dtype bf16
    python3 bench/gpu/run.py --skip-hetc                           # PyTorch only

hetc: the model is exported to ONNX (tools/export_test_models.export_onnx),
compiled with `hetc MODEL one_gpu.yaml --backend=cuda` for a one-device
cluster (one stage) and trained with launch.sh; tokens/s come from the stage
binary's step lines.  PyTorch: fp32 (`--dtype fp32`, the storage hetc's CUDA
backend has today) or bf16 autocast; AdamW as hetc train's defaults (lr 1e-3,
betas 0.9/0.95, eps 1e-8, wd 0.1 on rank >= 2, clip 1.0), fused AdamW.
TF32 matmuls are off in fp32 mode on both sides (hetc's cuBLASLt calls use
CUBLAS_COMPUTE_32F).

MFU = tokens/s x flops/token / peak, flops/token = 6 N + 12 L T d (PaLM's
estimate with N all parameters, as llm.c counts them);
peak from --peak-tflops or a table by the GPU's name.  Prints a Markdown row
for docs/PERF.md with the GPU's name.
"""
import argparse
import copy
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "bench", "train_host"))
import export_test_models as etm  # noqa: E402

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("bench/gpu: needs numpy and torch with CUDA")

LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \| grad norm (\S+) \| lr \S+ \| (\S+) tok/s")
ONE_GPU = "name: one-gpu\ndtype: {dt}\nmeshes:\n  - name: gpu\n    device: {dev}\n    nodes: 1\n    devices_per_node: 1\n"
# dense peak TFLOP/s (fp32 without TF32, bf16 tensor cores) by name fragment
PEAKS = {"H100": (67.0, 989.0), "H200": (67.0, 989.0), "A100": (19.5, 312.0),
         "V100": (15.7, 125.0), "T4": (8.1, 65.0), "L4": (30.3, 121.0)}


def gpt2_config(T, B):
    return dict(family="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_kv_head=12,
                ffn=3072, seq=T, batch=B, eps=1e-5, init_std=0.02, seed=124)


def batch_at(tokens, step, B, T, dev):
    nb = (len(tokens) - 1) // (B * T)
    off = (step % nb) * B * T
    buf = torch.from_numpy(tokens[off: off + B * T + 1].astype(np.int64)).to(dev)
    return buf[:-1].view(B, T), buf[1:].view(B, T)


def run_torch(model0, tokens, B, T, steps, compiled, dtype):
    torch.backends.cuda.matmul.allow_tf32 = dtype != "fp32"
    torch.backends.cudnn.allow_tf32 = dtype != "fp32"
    model = copy.deepcopy(model0).cuda().train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, fused=True)
    fwd = torch.compile(model) if compiled else model
    times, losses = [], []
    for k in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = batch_at(tokens, k, B, T, "cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = fwd(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        lv = loss.item()  # synchronises
        times.append(time.perf_counter() - t0)
        losses.append(lv)
    del model, opt, fwd
    torch.cuda.empty_cache()
    return times, losses


def run_prebuilt(out, data, B, T, steps, work):
    """A build bench/gpu/pack.sh compiled on another machine (no hetc here)"""
    return launch(out, data, B, T, steps, work)


def run_hetc(hetc, onnx_path, data, B, T, steps, work):
    cl = os.path.join(work, "one_gpu.yaml")
    open(cl, "w").write(ONE_GPU.format(dt="fp32", dev="A100-80GB"))
    out = os.path.join(work, "hetc_build")
    # fp32: what the CUDA backend has run (and --backend=cuda's default); said, not assumed
    cmd = [hetc, onnx_path, cl, "--backend=cuda", "--precision", "fp32", "--seq", str(T),
           "--microbatch", str(B),
           "--global-batch", str(B), "--steps", str(steps), "--lr", str(LR), "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"hetc compile failed: {' '.join(cmd)}\n{p.stderr[-4000:]}")
    return launch(out, data, B, T, steps, work)


def launch(out, data, B, T, steps, work):
    p = subprocess.run([os.path.join(out, "launch.sh"), "--data", data, "--steps", str(steps),
                        "--checkpoint-dir", os.path.join(work, "ckpt")],
                       capture_output=True, text=True)
    if p.returncode:  # the PyTorch rows still run: report, go on
        print(f"hetc stage binaries failed (exit {p.returncode})\n{p.stdout[-3000:]}\n"
              f"{p.stderr[-3000:]}", flush=True)
        return [], []
    times, losses = [], []
    for line in p.stdout.splitlines():
        m = STEP_RE.match(line)
        if m:
            tps = float(m.group(5))
            times.append(B * T / tps if tps > 0 else float("nan"))
            losses.append(float(m.group(3)))
    return times, losses


def tok_s(times, B, T, warmup):
    t = times[warmup:]
    return len(t) * B * T / sum(t) if t else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetc", default=os.path.join(ROOT, "build", "hetc"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="untimed first steps")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="PyTorch's precision (bf16: autocast); a --prebuilt build runs the "
                         "precision it was compiled with (pack.sh: bench/gpt2 fp32, "
                         "bench/gpt2_bf16 bf16-mixed)")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--skip-hetc", action="store_true")
    ap.add_argument("--prebuilt", metavar="DIR",
                    help="run this hetc --backend=cuda build (bench/gpu/pack.sh's bench/gpt2, "
                         "compiled elsewhere from tools/gen_model.py's zero-weight GPT-2: its "
                         "step-1 loss is ln(vocab), not PyTorch's) instead of compiling here")
    ap.add_argument("--skip-compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/gpu: no CUDA device visible to torch")
    name = torch.cuda.get_device_name(0)
    B, T = a.batch, a.seq
    cfg = gpt2_config(T, B)
    model0 = etm.build_model(cfg)
    nparams = sum(p.numel() for p in model0.parameters())
    flops_tok = 6 * nparams + 12 * cfg["n_layer"] * T * cfg["n_embd"]
    peak = a.peak_tflops
    if peak is None:
        for k, (p32, p16) in PEAKS.items():
            if k in name:
                peak = p32 if a.dtype == "fp32" else p16
    print(f"GPU {name}; GPT-2 124M ({nparams / 1e6:.1f} M parameters), B {B} x T {T}, "
          f"{a.steps} steps (first {a.warmup} untimed), {a.dtype}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hetc_gpu_bench_") as work:
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, cfg["vocab_size"], size=B * T * (a.steps + 1) + 1)
        data = os.path.join(work, "tokens.bin")
        etm.write_llmc_bin(data, tokens)
        rows = []
        if a.prebuilt:
            ht, hl = run_prebuilt(a.prebuilt, data, B, T, a.steps, work)
            rows.append(("hetc (cuda, fp32, zero init)", tok_s(ht, B, T, a.warmup), hl))
        elif not a.skip_hetc:
            onnx_path = os.path.join(work, "gpt2_124m.onnx")
            etm.export_onnx(model0, cfg, onnx_path, 17)
            ht, hl = run_hetc(a.hetc, onnx_path, data, B, T, a.steps, work)
            rows.append(("hetc (cuda, fp32)", tok_s(ht, B, T, a.warmup), hl))
        tt, tl = run_torch(model0, tokens, B, T, a.steps, False, a.dtype)
        rows.append((f"PyTorch eager ({a.dtype})", tok_s(tt, B, T, a.warmup), tl))
        if not a.skip_compile:
            ct, cl = run_torch(model0, tokens, B, T, a.steps, True, a.dtype)
            rows.append((f"PyTorch torch.compile ({a.dtype})", tok_s(ct, B, T, a.warmup), cl))
    best_torch = max(r[1] for r in rows if r[0].startswith("PyTorch"))
    print(f"\n| GPU | run | tokens/s | MFU | vs best PyTorch | step-1 loss |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for label, tps, losses in rows:
        mfu = f"{100 * tps * flops_tok / (peak * 1e12):.1f} %" if peak else "?"
        print(f"| {name} | {label} | {tps:,.0f} | {mfu} | {tps / best_torch:.2f}x | "
              f"{losses[0] if losses else float('nan'):.5f} |")
    if any(not r[2] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
