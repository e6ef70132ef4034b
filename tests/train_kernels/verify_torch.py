#!/usr/bin/env python3
"""One-off local check (NOT run in CI: CI has no torch) that the numpy
oracles in np_oracle.py are torch's formulas, and that a sample of the C
kernels agrees with torch autograd directly.

    python3 tests/train_kernels/verify_torch.py build-x/tests/train_kernels/train_driver

Record of runs (see README.md): torch 2.x CPU, all checks passed.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as Fn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import np_oracle  # noqa: E402

torch.manual_seed(0)
DRIVER = sys.argv[1] if len(sys.argv) > 1 else None
FAILS = []


def close(name, got, want, rtol=1e-5, atol=1e-7):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.max(np.abs(got - want)) if got.size else 0.0
    ok = got.shape == want.shape and err <= atol + rtol * np.max(np.abs(want))
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max err {err:.3g}")
    if not ok:
        FAILS.append(name)


def torch_adamw(p0, grads, lr, b1, b2, eps, wd):
    p = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    st = opt.state[p]
    return p.detach().numpy(), st["exp_avg"].numpy(), st["exp_avg_sq"].numpy()


def torch_sgd(p0, grads, lr, mom, damp, wd, nest):
    p = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=damp, weight_decay=wd,
                          nesterov=bool(nest))
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().numpy()


def check_oracles():
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(40)
    grads = [rng.standard_normal(40) * 0.1 for _ in range(7)]
    for hp in ((1e-3, 0.9, 0.95, 1e-8, 0.1), (3e-2, 0.8, 0.999, 1e-6, 0.0)):
        wp, wm, wv = torch_adamw(p0, grads, *hp)
        gp, gm, gv = np_oracle.adamw_np(p0, grads, *hp)
        close(f"adamw_np vs torch.optim.AdamW {hp} p", gp, wp, 1e-12)
        close(f"adamw_np m {hp}", gm, wm, 1e-12)
        close(f"adamw_np v {hp}", gv, wv, 1e-12)
    for hp in ((0.1, 0.0, 0.0, 0.0, 0), (0.05, 0.9, 0.0, 0.01, 0), (0.05, 0.9, 0.1, 0.0, 0),
               (0.05, 0.9, 0.0, 0.1, 1)):
        close(f"sgd_np vs torch.optim.SGD {hp}", np_oracle.sgd_np(p0, grads, *hp)[0],
              torch_sgd(p0, grads, *hp), 1e-12)
    for max_norm in (0.5, 100.0):
        gs = [rng.standard_normal(s) for s in (10, 12, 7)]
        ps = [torch.nn.Parameter(torch.zeros(len(g), dtype=torch.float64)) for g in gs]
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g)
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        t, coef = np_oracle.clip_np(gs, max_norm)
        close(f"clip_np total_norm {max_norm}", t, float(total), 1e-12)
        for i, (p, g) in enumerate(zip(ps, gs)):
            close(f"clip_np scaled grad {i} {max_norm}", g * coef, p.grad.numpy(), 1e-12)


def drive(case, arrays, params, arg=None):
    with tempfile.TemporaryDirectory() as d:
        for k, v in arrays.items():
            np.save(os.path.join(d, k + ".npy"), v)
        np.save(os.path.join(d, "params.npy"), np.asarray(params, np.float64))
        subprocess.run([DRIVER, case, d] + ([arg] if arg else []), check=True)
        return {f[4:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("out_")}


def grads_of(f, *xs):
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    y = f(*ts)
    return y, ts


def check_kernels():
    rng = np.random.default_rng(1)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    # layernorm / rmsnorm
    x, g, b, dy = r(5, 8), r(8), r(8), r(5, 8)
    y, (tx, tg, tb) = grads_of(lambda x, g, b: Fn.layer_norm(x, (8,), g, b, 1e-5), x, g, b)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    out = drive("layernorm", {"x": x, "scale": g, "dy": dy}, [5, 8, 1e-5, 0])
    close("layernorm dx vs torch", out["dx"].reshape(5, 8), tx.grad, 1e-4)
    close("layernorm dscale vs torch", out["dscale"], tg.grad, 1e-4)
    close("layernorm dbias vs torch", out["dbias"], tb.grad, 1e-4)
    y, (tx, tg) = grads_of(lambda x, g: Fn.rms_norm(x, (8,), g, 1e-6), x, g)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    out = drive("rmsnorm", {"x": x, "scale": g, "dy": dy}, [5, 8, 1e-6, 0])
    close("rmsnorm dx vs torch", out["dx"].reshape(5, 8), tx.grad, 1e-4)
    close("rmsnorm dscale vs torch", out["dscale"], tg.grad, 1e-4)
    # activations
    x, dy = r(64) * 3, r(64)
    for name, f in (("gelu", lambda t: Fn.gelu(t)), ("gelu_tanh", lambda t: Fn.gelu(t, approximate="tanh")),
                    ("silu", Fn.silu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
                    ("erf", torch.erf), ("exp", torch.exp)):
        y, (tx,) = grads_of(f, x)
        y.backward(torch.tensor(dy, dtype=torch.float64))
        close(f"{name} backward vs torch", drive("unary", {"x": x, "dy": dy}, [0], name)["dx"], tx.grad, 1e-5)
    # attention vs scaled_dot_product_attention
    q, k, v, do = r(2, 6, 4), r(2, 6, 4), r(2, 6, 3), r(2, 6, 3)
    y, (tq, tk, tv) = grads_of(lambda q, k, v: Fn.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    y.backward(torch.tensor(do, dtype=torch.float64))
    out = drive("attention", {"q": q, "k": k, "v": v, "dout": do}, [1, 0.5])
    close("attention dq vs sdpa", out["dq"], tq.grad, 1e-4)
    close("attention dk vs sdpa", out["dk"], tk.grad, 1e-4)
    close("attention dv vs sdpa", out["dv"], tv.grad, 1e-4)
    # cross entropy with ignore_index
    lg = r(7, 11)
    t = rng.integers(0, 11, 7)
    t[2] = -100
    y, (tl,) = grads_of(lambda l: Fn.cross_entropy(l, torch.tensor(t), ignore_index=-100), lg)
    y.backward()
    out = drive("ce", {"logits": lg, "targets": t.astype(np.int64)}, [1, -100, 1.0, 1, 0])
    close("cross_entropy loss vs torch", out["loss"], y.item(), 1e-5)
    close("cross_entropy dlogits vs torch", out["dlogits"], tl.grad, 1e-5)
    # embedding
    ids = rng.integers(0, 9, (3, 4))
    dy = r(3, 4, 5)
    tab = torch.zeros(9, 5, dtype=torch.float64, requires_grad=True)
    Fn.embedding(torch.tensor(ids), tab).backward(torch.tensor(dy, dtype=torch.float64))
    out = drive("embedding", {"ids": ids.astype(np.int64), "dy": dy}, [9, 0, 0])
    close("embedding dtable vs torch", out["dtable"].reshape(9, 5), tab.grad, 1e-6)
    # AdamW: the C kernel against torch.optim.AdamW in fp32, 10 steps
    p0, gs = r(30), r(10, 30) * 0.1
    p = torch.nn.Parameter(torch.tensor(p0))
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for g in gs:
        p.grad = torch.tensor(g)
        opt.step()
    out = drive("adamw", {"p": p0, "g": gs}, [1e-3, 0.9, 0.95, 1e-8, 0.1, 0])
    close("adamw kernel vs torch.optim.AdamW fp32", out["p"], p.detach().numpy(), 1e-6)


if __name__ == "__main__":
    print("torch", torch.__version__)
    check_oracles()
    if DRIVER:
        check_kernels()
    print("FAILED: " + ", ".join(FAILS) if FAILS else "all checks passed")
    sys.exit(1 if FAILS else 0)
