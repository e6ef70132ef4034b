#!/usr/bin/env python3
"""Host training throughput: hetc against what users would run instead.

    python3 bench/train_host/run.py --hetc build/hetc                    # tiny + gpt2
    python3 bench/train_host/run.py --hetc build/hetc --models tiny      # about a minute
    python3 bench/train_host/run.py --hetc build/hetc --llmc ~/llm.c     # + llm.c's train_gpt2.c

A developer benchmark (needs torch; CI never runs it).  Contenders, each a
separate process on the same weights, batches and thread count:

  hetc     `hetc train` (the single-process trainer; by default it compiles the
           one-stage program and runs it: the step times exclude the compile)
  executor `hetc train --engine executor` (the host executor loop; not in the
           default set)
  launch   `hetc compile` onto a one-device cluster + the stage binary's launch.sh
  eager    PyTorch eager, default (foreach) AdamW, clip_grad_norm_
  compile  the same with the model under torch.compile (inductor, CPU)
  llmc     llm.c's CPU trainer train_gpt2.c (with --llmc DIR, an llm.c checkout),
           built by its own Makefile, OpenMP with --threads threads, its
           checkpoint written from the same weights (GPT-2 family models only)

Optimizer everywhere but llm.c: AdamW betas 0.9/0.95, eps 1e-8, weight decay
0.1 on rank >= 2 parameters, global-norm clip 1.0, constant lr 1e-3 (hetc
train's defaults); llm.c keeps its own (lr 1e-4, betas 0.9/0.999, no weight
decay, no clip): the same arithmetic per step.  Rounds alternate over the
contenders (hetc, launch, eager, compile, llmc, hetc, ...); each figure is
the median over rounds, so a noisy neighbour on a shared machine hits every
side.  The first --warmup steps of every run are untimed (first-touch
allocation, BLAS threads, torch.compile's compilation).  Peak RSS is the
process tree's (wait4's ru_maxrss: the largest process).

--precision bf16-mixed runs hetc and launch with `--precision bf16-mixed` and
eager / compile under torch.autocast("cpu", dtype=torch.bfloat16) (fp32
master weights and AdamW); `both` runs every contender in fp32 and again in
bf16 (named hetc-bf16, eager-bf16, ...), alternating, so the two precisions'
figures come from one run.  llm.c's CPU trainer is fp32 only.

Sanity check (exit status 1 if it fails): every contender's step-1 loss
equals eager's within 1e-3 relative (step 1 runs the initial weights on the
first batch; llm.c reads the same first batch: its shuffling is turned off);
a bf16 contender's equals eager-bf16's within 2e-2 (bf16 rounding of GEMM
inputs; hetc and autocast cast at different places).
Batching is llm.c's: step k reads B*T+1 tokens at offset k*B*T.
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
import shutil

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



TIME = "/usr/bin/time"  # GNU time (Debian package time): peak RSS of each run
CONTENDERS = ("hetc", "launch", "eager", "compile", "llmc")
KNOWN = CONTENDERS + ("executor",)


# ------------------------------------------------------------------ models

def model_case(name, args, work):
    """(config, onnx path, token file, steps, B, T, torch module) of a model name."""
    if name == "tiny":
        B, T = map(int, args.tiny_batch.split("x"))
        onnx_path = os.path.join(ROOT, "examples", "gpt_tiny.onnx")
        with open(os.path.join(ROOT, "examples", "gpt_tiny.json")) as f:
            cfg = json.load(f)
        if T > cfg["seq"]:
            sys.exit(f"tiny: --tiny-batch seq {T} > the model's {cfg['seq']} positions")
        model0 = etm.build_model(cfg)
        load_onnx_weights(model0, onnx_path, cfg["initializers"]["gpt_tiny.onnx"])
        return cfg, onnx_path, os.path.join(ROOT, "examples", "tiny_corpus.bin"), \
            args.steps or 12, B, T, model0
    if name == "gpt2":
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
        return cfg, onnx_path, data, steps, B, T, model0
    sys.exit(f"bench/train_host: unknown model {name!r}")


# ------------------------------------------------------------------ processes

def peak_rss_mb_of(cmd, env=None, cwd=None):
    """Run cmd; (returncode, stdout, stderr, wall s, peak RSS MB).  The RSS is GNU
    time's %M (the largest process of the tree): wait4 on a child forked from this
    Python would count the parent's pages it inherited before exec (with torch
    loaded, ~500 MB)."""
    fd, rss_path = tempfile.mkstemp(prefix="hetc_bench_rss_")
    os.close(fd)
    t0 = time.perf_counter()
    p = subprocess.run([TIME, "-f", "%M", "-o", rss_path] + cmd, capture_output=True, text=True,
                       env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    with open(rss_path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip().isdigit()]
    os.unlink(rss_path)
    return p.returncode, p.stdout, p.stderr, wall, int(lines[-1]) / 1024.0 if lines else float("nan")


def run_hetc(hetc, onnx_path, data, B, T, steps, out_dir, env, precision="fp32", engine=None):
    cmd = [hetc, "train", onnx_path, "--data", data, "--steps", str(steps), "--microbatch", str(B),
           "--seq", str(T), "--no-checkpoint", "-o", out_dir, "--precision", precision]
    cmd += ["--engine", engine] if engine else []
    rc, out, err, wall, rss = peak_rss_mb_of(cmd, env=env)
    if rc != 0:
        sys.exit(f"hetc train failed ({rc}): {' '.join(cmd)}\n{out}\n{err}")
    return hetc_steps(out, B, T, steps, "hetc train") + (wall, rss)


def hetc_steps(out, B, T, steps, what):
    times, losses = [], []
    for line in out.splitlines():
        m = STEP_RE.match(line)
        if m:
            tok_s = float(m.group(5))
            times.append(B * T / tok_s if tok_s > 0 else float("nan"))
            losses.append(float(m.group(3)))
    if len(times) != steps:
        sys.exit(f"{what} printed {len(times)} step lines, expected {steps}:\n{out[-3000:]}")
    return times, losses


def build_launch(hetc, onnx_path, B, T, work, name, precision="fp32"):
    """hetc compile onto one device: a one-stage program and its launch.sh."""
    yaml_path = os.path.join(ROOT, "examples", "clusters", "one_host.yaml")
    out = os.path.join(work, f"stage_{name}_{precision}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [hetc, "compile", onnx_path, yaml_path, "-o", out, "--microbatch", str(B),
           "--global-batch", str(B), "--seq", str(T), "--precision", precision]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"hetc compile failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return os.path.join(out, "launch.sh")


def run_launch(launch, data, B, T, steps, env):
    # the run's checkpoints go to the work dir (the default is ./checkpoints)
    ckpt = os.path.join(os.path.dirname(launch), "checkpoints")
    cmd = [launch, "--data", data, "--steps", str(steps), "--overwrite-checkpoints",
           "--checkpoint-every", "0", "--checkpoint-dir", ckpt]
    rc, out, err, wall, rss = peak_rss_mb_of(cmd, env=env)
    if rc != 0:
        sys.exit(f"launch.sh failed ({rc}): {' '.join(cmd)}\n{out}\n{err}")
    return hetc_steps(out, B, T, steps, "launch.sh") + (wall, rss)


def run_torch_worker(mode, name, args, work, B, T, steps, env, precision="fp32"):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--models", name,
           "--threads", str(args.threads), "--steps", str(steps), "--tiny-batch", args.tiny_batch,
           "--gpt2-batch", args.gpt2_batch, "--keep", work, "--precision", precision]
    rc, out, err, wall, rss = peak_rss_mb_of(cmd, env=env)
    if rc != 0:
        sys.exit(f"torch {mode} worker failed ({rc}):\n{out}\n{err[-3000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    return r["times"], r["losses"], wall, rss


def torch_train(model0, tokens, B, T, steps, compiled, bf16=False):
    """Train a fresh copy of model0 for `steps` steps; per-step seconds and losses.
    bf16: forward and loss under torch.autocast("cpu", bfloat16), what a user
    of CPU mixed precision writes; the weights and AdamW stay fp32."""
    model = copy.deepcopy(model0).train()
    fwd = torch.compile(model) if compiled else model
    opt = make_optimizer(model)
    times, losses = [], []
    for k in range(steps):
        t0 = time.perf_counter()
        x, y = batch_at(tokens, k, B, T)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        lv = loss.item()
        times.append(time.perf_counter() - t0)
        losses.append(lv)
    return times, losses


# ------------------------------------------------------------------ llm.c

LLMC_PATCHES = [  # (what train_gpt2.c says, what the bench runs instead); each must match once
    ("int B = 4;", "int B = {B};"),
    ("int T = 64;", "int T = {T};"),
    ("for (int step = 0; step <= 40; step++) {", "for (int step = 0; step < {steps}; step++) {"),
    ("if (step % 10 == 0) {", "if (0) { /* bench: no validation */"),
    ("if (step > 0 && step % 20 == 0) {", "if (0) { /* bench: no sampling */"),
    ("dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);",
     "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 0); /* bench: no shuffle */"),
]
LLMC_STEP_RE = re.compile(r"^step (\d+): train loss (\S+) \(took (\S+) ms\)")


def build_llmc(src, work, B, T, steps):
    """Copy an llm.c checkout's CPU trainer, patch B, T, steps, no validation /
    sampling / shuffling, build it with its Makefile; the binary's directory."""
    d = os.path.join(work, f"llmc_{B}x{T}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in ("Makefile", "train_gpt2.c"):
        shutil.copy(os.path.join(src, f), d)
    shutil.copytree(os.path.join(src, "llmc"), os.path.join(d, "llmc"))
    path = os.path.join(d, "train_gpt2.c")
    code = open(path).read()
    for old, new in LLMC_PATCHES:
        if code.count(old) != 1:
            sys.exit(f"--llmc {src}: train_gpt2.c does not contain {old!r} exactly once "
                     "(a different llm.c version?)")
        code = code.replace(old, new.replace("{B}", str(B)).replace("{T}", str(T))
                            .replace("{steps}", str(steps)))
    open(path, "w").write(code)
    p = subprocess.run(["make", "train_gpt2"], cwd=d, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"llm.c build failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    flags = [ln for ln in p.stdout.splitlines() if "train_gpt2.c" in ln]
    print(f"llm.c: built {d}/train_gpt2: {flags[-1].strip() if flags else '?'}", flush=True)
    return d


def write_llmc_checkpoint(model0, cfg, path):
    """llm.c's gpt2 checkpoint (version 3: padded vocab) from the torch module."""
    sd = {k: v.detach().float().numpy() for k, v in model0.state_dict().items()}
    V, C, L = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"]
    maxT = sd["wpe.weight"].shape[0]
    Vp = (V + 127) // 128 * 128
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = sd["wte.weight"]

    def per_layer(key):
        return np.concatenate([sd[f"h.{i}.{key}"].reshape(-1) for i in range(L)])
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 3, maxT, V, L, cfg["n_head"], C, Vp]
    parts = [wte, sd["wpe.weight"]] + [per_layer(k) for k in (
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")] + \
        [sd["ln_f.weight"], sd["ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for a in parts:
            f.write(np.ascontiguousarray(a, np.float32).tobytes())


def prepare_llmc(src, work, cfg, model0, data, B, T, steps):
    if cfg.get("family") not in ("gpt2", "gpt"):
        return None
    d = build_llmc(src, work, B, T, steps)
    write_llmc_checkpoint(model0, cfg, os.path.join(d, "gpt2_124M.bin"))
    dd = os.path.join(d, "dev", "data", "tinyshakespeare")
    os.makedirs(dd, exist_ok=True)
    for split in ("train", "val"):
        shutil.copy(data, os.path.join(dd, f"tiny_shakespeare_{split}.bin"))
    return d


def run_llmc(d, B, T, steps, env):
    rc, out, err, wall, rss = peak_rss_mb_of([os.path.join(d, "train_gpt2")], env=env, cwd=d)
    if rc != 0:
        sys.exit(f"llm.c train_gpt2 failed ({rc}):\n{out[-3000:]}\n{err[-3000:]}")
    times, losses = [], []
    for line in out.splitlines():
        m = LLMC_STEP_RE.match(line)
        if m:
            times.append(float(m.group(3)) / 1e3)
            losses.append(float(m.group(2)))
    if len(times) != steps:
        sys.exit(f"llm.c printed {len(times)} step lines, expected {steps}:\n{out[-3000:]}")
    return times, losses, wall, rss


# ------------------------------------------------------------------ the bench

def tok_per_s(times, B, T, warmup):
    t = times[warmup:]
    return len(t) * B * T / sum(t)


def bench_case(name, args, work, which):
    cfg, onnx_path, data, steps, B, T, model0 = model_case(name, args, work)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    runners = {}
    precs = ["fp32", "bf16-mixed"] if args.precision == "both" else [args.precision]
    for pr in precs:
        sfx = "" if pr == "fp32" else "-bf16"
        if "hetc" in which:
            runners["hetc" + sfx] = (lambda pr: lambda: run_hetc(
                args.hetc, onnx_path, data, B, T, steps, os.path.join(work, "hetc_out"), env,
                pr))(pr)
        if "executor" in which:
            runners["executor" + sfx] = (lambda pr: lambda: run_hetc(
                args.hetc, onnx_path, data, B, T, steps, os.path.join(work, "hetc_out"), env,
                pr, "executor"))(pr)
        if "launch" in which:
            launch = build_launch(args.hetc, onnx_path, B, T, work, name, pr)
            runners["launch" + sfx] = (lambda l: lambda: run_launch(l, data, B, T, steps,
                                                                     env))(launch)
        for mode in ("eager", "compile"):
            if mode in which:
                runners[mode + sfx] = (lambda m, pr: lambda: run_torch_worker(
                    m, name, args, work, B, T, steps, env, pr))(mode, pr)
    if "llmc" in which and args.llmc and "fp32" in precs:
        d = prepare_llmc(args.llmc, work, cfg, model0, data, B, T, steps)
        if d:
            runners["llmc"] = lambda: run_llmc(d, B, T, steps, env)
    res = {k: {"tps": [], "rss": [], "loss1": None, "last": None, "ms": []} for k in runners}
    for r in range(args.rounds):
        line = []
        for k, fn in runners.items():
            times, losses, wall, rss = fn()
            res[k]["tps"].append(tok_per_s(times, B, T, args.warmup))
            res[k]["rss"].append(rss)
            res[k]["ms"].append(1e3 * statistics.median(times[args.warmup:]))
            res[k]["loss1"], res[k]["last"] = losses[0], losses[-1]
            line.append(f"{k} {res[k]['tps'][-1]:.1f}")
        print(f"  [{name}] round {r + 1}/{args.rounds} tok/s: {', '.join(line)}; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{name}: B={B} T={T} steps={steps} (first {args.warmup} untimed) rounds={args.rounds} "
          f"threads={args.threads}; load average now {os.getloadavg()[0]:.2f}")
    ok = True
    for k, v in res.items():
        med = statistics.median(v["tps"])
        bf = k.endswith("-bf16")
        refname = "eager-bf16" if bf else "eager"
        ref = res.get(refname)
        tol = 2e-2 if bf else 1e-3
        rel = abs(v["loss1"] - ref["loss1"]) / abs(ref["loss1"]) if ref else 0.0
        good = rel <= tol
        ok &= good
        print(f"  {k:12s} {med:10.1f} tok/s ({statistics.median(v['ms']):.0f} ms/step; rounds "
              f"{', '.join(f'{t:.1f}' for t in v['tps'])}); peak RSS {max(v['rss']):.0f} MB; "
              f"step-1 loss {v['loss1']:.7f}"
              f"{'' if good else f' FAIL (> {tol:g} from {refname})'}; "
              f"step-{steps} {v['last']:.5f}")
    for h in ("hetc", "launch", "executor", "hetc-bf16", "launch-bf16", "executor-bf16"):
        if h not in res:
            continue
        hm = statistics.median(res[h]["tps"])
        ratios = [f"{hm / statistics.median(res[o]['tps']):.3f}x {o}" for o in res
                  if not o.startswith(("hetc", "launch", "executor")) or
                  (h.endswith("-bf16") and o == h[:-5])]
        print(f"  {h}: {', '.join(ratios)}")
    return ok


def worker(args):
    """One torch run in its own process (so its RSS and threads are its own)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = args.keep
    cfg, onnx_path, data, steps, B, T, model0 = model_case(args.models, args, work)
    times, losses = torch_train(model0, read_llmc_tokens(data), B, T, steps,
                                args.worker == "compile", args.precision == "bf16-mixed")
    print(json.dumps({"times": times, "losses": losses}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hetc", default=os.path.join(ROOT, "build", "hetc"))
    ap.add_argument("--models", default="tiny,gpt2", help="comma list of tiny, gpt2")
    ap.add_argument("--contenders", default=",".join(CONTENDERS),
                    help=f"comma list of {', '.join(CONTENDERS)} (llmc needs --llmc)")
    ap.add_argument("--llmc", default=None, help="an llm.c checkout (for the llmc contender)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per model")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: 12 tiny, 5 gpt2)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed leading steps of each run")
    ap.add_argument("--tiny-batch", default="4x64", help="BxT for tiny")
    ap.add_argument("--gpt2-batch", default="4x256", help="BxT for gpt2")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads of every contender (torch.set_num_threads, OMP_NUM_THREADS)")
    ap.add_argument("--keep", default=None, help="work directory to keep (default: a temp dir)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed", "both"),
                    help="hetc's --precision; torch under CPU autocast for bf16-mixed; both: "
                         "each contender in each, one run")
    ap.add_argument("--worker", choices=("eager", "compile"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    if not os.access(TIME, os.X_OK):
        sys.exit(f"bench/train_host: needs GNU time at {TIME} (apt-get install time)")
    which = set(args.contenders.split(","))
    if which - set(KNOWN):
        sys.exit(f"bench/train_host: unknown contenders {sorted(which - set(KNOWN))}")
    if which & {"hetc", "launch", "executor"} and not os.access(args.hetc, os.X_OK):
        sys.exit(f"bench/train_host: no hetc at {args.hetc} (pass --hetc)")
    if "llmc" in which and args.llmc and not os.path.exists(os.path.join(args.llmc, "train_gpt2.c")):
        sys.exit(f"bench/train_host: --llmc {args.llmc} has no train_gpt2.c")
    blas_env = {k: v for k, v in os.environ.items()
                if k.startswith(("OPENBLAS", "OMP_", "MKL_", "HETC_"))}
    print(f"hetc {args.hetc}; torch {torch.__version__}; {args.threads} threads each; "
          f"{os.cpu_count()} cores; env {blas_env or 'none of OPENBLAS_* OMP_* MKL_* HETC_* set'}")

    work = args.keep or tempfile.mkdtemp(prefix="hetc_train_bench_")
    os.makedirs(work, exist_ok=True)
    ok = True
    for name in args.models.split(","):
        ok &= bench_case(name, args, work, which)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
