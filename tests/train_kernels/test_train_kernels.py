#!/usr/bin/env python3
"""Checks the host training kernels (kernels/host/train_*.c) and the
runtime's data loader and lr schedule through train_driver.

Oracles, all independent of the C code:
  - every backward rule: a numpy analytic gradient written here, itself
    checked against central finite differences of a float64 numpy forward;
    the C result (fp32) must match both;
  - optimizers / clipping / lr: np_oracle.py (numpy transcriptions of the
    torch.optim and nanoGPT formulas, verified against torch by
    verify_torch.py);
  - data loader: np_oracle.llmc_batch (llm.c's loader logic) on files
    written here, and every malformed-file error.

usage: test_train_kernels.py <train_driver> <grads|loss|optim|data|all>
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import np_oracle  # noqa: E402

DRIVER = sys.argv[1]
RNG = np.random.default_rng(1234)
FAILS = []
CHECKS = [0]

# fp32 kernels against float64 oracles: the error is relative to the
# largest magnitude of the expected tensor (sums of many terms can cancel
# elementwise).
RTOL = 1e-4
ATOL = 1e-6


def check(name, got, want, rtol=RTOL, atol=ATOL):
    CHECKS[0] += 1
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        FAILS.append(f"{name}: shape {got.shape} != {want.shape}")
        return
    if got.size == 0:
        return
    scale = float(np.max(np.abs(want))) if np.all(np.isfinite(want)) else 0.0
    err = float(np.max(np.abs(got - want))) if np.all(np.isfinite(got)) else math.inf
    if not err <= atol + rtol * scale:
        FAILS.append(f"{name}: max abs err {err:.3g} > {atol} + {rtol} * {scale:.3g}")


def expect(name, cond, msg=""):
    CHECKS[0] += 1
    if not cond:
        FAILS.append(f"{name}: {msg}")


def run(case, arrays, params=(), arg=None, fail=False):
    with tempfile.TemporaryDirectory() as d:
        for k, v in arrays.items():
            np.save(os.path.join(d, k + ".npy"), v)
        np.save(os.path.join(d, "params.npy"), np.asarray(params, dtype=np.float64))
        cmd = [DRIVER, case, d] + ([arg] if arg else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        outs = {f[4:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d)
                if f.startswith("out_")}
    if fail:
        return r.returncode, r.stderr, outs
    if r.returncode != 0:
        FAILS.append(f"{case} {arg or ''}: driver exit {r.returncode}: {r.stderr.strip()}")
        return None
    return outs


def f32(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def fd_grad(f, inputs, i, dy, h=1e-6):
    """d/d inputs[i] of sum(f(*inputs) * dy), central differences, float64."""
    xs = [np.array(x, dtype=np.float64) for x in inputs]
    x = xs[i]
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + h
        fp = float((f(*xs) * dy).sum())
        flat[k] = old - h
        fm = float((f(*xs) * dy).sum())
        flat[k] = old
        gf[k] = (fp - fm) / (2 * h)
    return g


def grad_check(name, f, inputs, dy, analytic, got, rtol=RTOL):
    """analytic (numpy) vs finite differences, then C (got) vs both."""
    for i, (a, c) in enumerate(zip(analytic, got)):
        if a is None:
            continue
        fd = fd_grad(f, inputs, i, np.asarray(dy, np.float64))
        check(f"{name} d{i} numpy-vs-fd", a, fd, rtol=1e-6, atol=1e-7)
        check(f"{name} d{i} C-vs-numpy", c, a, rtol=rtol)
        check(f"{name} d{i} C-vs-fd", c, fd, rtol=rtol)


# ------------------------------------------------------------------ grads
def op_t(x, t):
    return np.swapaxes(x, -1, -2) if t else x


def test_matmul():
    batch, M, N, K = 2, 3, 4, 5
    for ta in (0, 1):
        for tb in (0, 1):
            for a_sh, b_sh in ((0, 0), (0, 1), (1, 0)):
                for acc in (0, 1):
                    ashape = ((1,) if a_sh else (batch,)) + ((K, M) if ta else (M, K))
                    bshape = ((1,) if b_sh else (batch,)) + ((N, K) if tb else (K, N))
                    a, b, dc = f32(*ashape), f32(*bshape), f32(batch, M, N)

                    def fwd(a, b, ta=ta, tb=tb):
                        return op_t(a, ta) @ op_t(b, tb)
                    da = op_t(dc.astype(np.float64) @ np.swapaxes(op_t(b.astype(np.float64), tb), -1, -2), ta)
                    db = op_t(np.swapaxes(op_t(a.astype(np.float64), ta), -1, -2) @ dc.astype(np.float64), tb)
                    if a_sh:
                        da = da.sum(0, keepdims=True)
                    if b_sh:
                        db = db.sum(0, keepdims=True)
                    arrays = {"a": a, "b": b, "dc": dc}
                    da0, db0 = f32(*ashape), f32(*bshape)
                    if acc:
                        arrays.update(da_in=da0, db_in=db0)
                    out = run("matmul", arrays, [batch, M, N, K, ta, tb, a_sh, b_sh, acc])
                    if out is None:
                        continue
                    name = f"matmul ta={ta} tb={tb} shared=({a_sh},{b_sh}) accum={acc}"
                    gda = out["da"].reshape(ashape) - (da0 if acc else 0)
                    gdb = out["db"].reshape(bshape) - (db0 if acc else 0)
                    if acc:  # the FD check runs once per layout, on accum=0
                        check(name + " da", gda, da)
                        check(name + " db", gdb, db)
                    else:
                        grad_check(name, fwd, [a, b], dc, [da, db], [gda, gdb])


def test_linear():
    M, K, N = 6, 5, 4
    x, w, bias, dy = f32(M, K), f32(K, N), f32(N), f32(M, N)
    out = run("linear", {"x": x, "w": w, "dy": dy}, [M, K, N, 0])
    x64, w64, dy64 = (t.astype(np.float64) for t in (x, w, dy))
    want = [dy64 @ w64.T, x64.T @ dy64, dy64.sum(0)]
    if out:
        grad_check("linear", lambda x, w, b: x @ w + b, [x, w, bias], dy, want,
                   [out["dx"].reshape(M, K), out["dw"].reshape(K, N), out["db"]])
    dw0, db0 = f32(K, N), f32(N)
    out = run("linear", {"x": x, "w": w, "dy": dy, "dw_in": dw0, "db_in": db0}, [M, K, N, 1])
    if out:
        check("linear accum dw", out["dw"].reshape(K, N), dw0 + want[1])
        check("linear accum db", out["db"], db0 + want[2])


def ln_fwd(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def rms_fwd(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def test_norms():
    outer, n, eps = 5, 7, 1e-5
    for saved in (0, 1):
        x, g, b, dy = f32(outer, n, lo=-2, hi=2), f32(n, lo=0.5, hi=1.5), f32(n), f32(outer, n)
        x64, g64, dy64 = (t.astype(np.float64) for t in (x, g, dy))
        # layernorm: textbook derivation written as the full Jacobian-vector
        # product, independent of the kernel's folded formula
        mu = x64.mean(-1, keepdims=True)
        var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
        rstd = 1 / np.sqrt(var + eps)
        xh = (x64 - mu) * rstd
        gx = dy64 * g64
        dx = rstd / n * (n * gx - gx.sum(-1, keepdims=True) - xh * (gx * xh).sum(-1, keepdims=True))
        out = run("layernorm", {"x": x, "scale": g, "dy": dy}, [outer, n, eps, saved])
        if out:
            grad_check(f"layernorm saved={saved}", lambda x, g, b: ln_fwd(x, g, b, eps),
                       [x, g, b], dy, [dx, (dy64 * xh).sum(0), dy64.sum(0)],
                       [out["dx"].reshape(outer, n), out["dscale"], out["dbias"]])
            if saved:
                check("layernorm stats mean", out["mean"], mu[:, 0])
                check("layernorm stats rstd", out["rstd"], rstd[:, 0])
        # rmsnorm
        r = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
        dxr = r * gx - x64 * r ** 3 * (gx * x64).mean(-1, keepdims=True)
        out = run("rmsnorm", {"x": x, "scale": g, "dy": dy}, [outer, n, eps, saved])
        if out:
            grad_check(f"rmsnorm saved={saved}", lambda x, g: rms_fwd(x, g, eps), [x, g], dy,
                       [dxr, (dy64 * x64 * r).sum(0)],
                       [out["dx"].reshape(outer, n), out["dscale"]])


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_softmax():
    for shape, axis in (((3, 4, 5), 1), ((4, 6), -1), ((2, 3, 4), 0)):
        for log in (0, 1):
            x, dy = f32(*shape, lo=-3, hi=3), f32(*shape)
            x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
            s = np_softmax(x64, axis)
            if log:
                fwd = lambda x, a=axis: np.log(np_softmax(x, a))  # noqa: E731
                y = np.log(s)
                want = dy64 - s * dy64.sum(axis, keepdims=True)
            else:
                fwd = lambda x, a=axis: np_softmax(x, a)  # noqa: E731
                y = s
                want = s * (dy64 - (dy64 * s).sum(axis, keepdims=True))
            out = run("softmax", {"y": y.astype(np.float32), "dy": dy}, [axis, log])
            if out:
                grad_check(f"softmax shape={shape} axis={axis} log={log}", fwd, [x], dy,
                           [want], [out["dx"]])


def _erf(x):
    return np.vectorize(math.erf)(x)


def _phi_cdf(x):
    return 0.5 * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _sig(x):
    return 1 / (1 + np.exp(-x))


# name -> (forward, derivative, input range); derivatives written from
# calculus here, not from the kernel's table.
UNARY = {
    "exp": (np.exp, np.exp, (-2, 2)),
    "log": (np.log, lambda x: 1 / x, (0.2, 3)),
    "sqrt": (np.sqrt, lambda x: 0.5 / np.sqrt(x), (0.2, 3)),
    "tanh": (np.tanh, lambda x: 1 / np.cosh(x) ** 2, (-3, 3)),
    "sigmoid": (_sig, lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2, (-4, 4)),
    "erf": (_erf, lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), (-2, 2)),
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(np.float64), (-2, 2)),
    "neg": (lambda x: -x, lambda x: -np.ones_like(x), (-2, 2)),
    "reciprocal": (lambda x: 1 / x, lambda x: -1 / (x * x), (0.3, 3)),
    "gelu": (lambda x: x * _phi_cdf(x),
             lambda x: _phi_cdf(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi), (-4, 4)),
    "gelu_tanh": (_gelu_tanh, None, (-4, 4)),  # derivative: sympy-free, by FD only below
    "silu": (lambda x: x * _sig(x), lambda x: _sig(x) + x * _sig(x) * (1 - _sig(x)), (-5, 5)),
}


def _gelu_tanh_deriv(x):
    # d/dx of 0.5 x (1 + tanh(c (x + a x^3))) by the product and chain rules
    c, a = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(c * (x + a * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x)


UNARY["gelu_tanh"] = (_gelu_tanh, _gelu_tanh_deriv, (-4, 4))


def test_unary():
    names = subprocess.run([DRIVER, "list_unary"], capture_output=True, text=True,
                           check=True).stdout.split()
    expect("unary table non-empty", len(names) >= 12, str(names))
    for name in names:
        if name not in UNARY:
            FAILS.append(f"unary rule {name!r} has no numpy oracle in this test")
            continue
        fwd, deriv, (lo, hi) = UNARY[name]
        x = f32(40, lo=lo, hi=hi)
        if name == "relu":  # keep clear of the kink for finite differences
            x[np.abs(x) < 0.05] = 0.5
        dy = f32(40)
        x64 = x.astype(np.float64)
        want = dy.astype(np.float64) * deriv(x64)
        for use_y in (0, 1):
            arrays = {"x": x, "dy": dy}
            if use_y:
                arrays["y"] = fwd(x64).astype(np.float32)
            out = run("unary", arrays, [use_y], arg=name)
            if out:
                grad_check(f"unary {name} use_y={use_y}", fwd, [x], dy, [want], [out["dx"]])


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: (np.ones_like(a), np.ones_like(b))),
    "sub": (lambda a, b: a - b, lambda a, b: (np.ones_like(a), -np.ones_like(b))),
    "mul": (lambda a, b: a * b, lambda a, b: (b, a)),
    "div": (lambda a, b: a / b, lambda a, b: (1 / b, -a / b ** 2)),
    "pow": (lambda a, b: a ** b, lambda a, b: (b * a ** (b - 1), a ** b * np.log(a))),
}


def test_binary():
    names = subprocess.run([DRIVER, "list_binary"], capture_output=True, text=True,
                           check=True).stdout.split()
    expect("binary table non-empty", len(names) >= 5, str(names))
    for name in names:
        if name not in BINARY:
            FAILS.append(f"binary rule {name!r} has no numpy oracle in this test")
            continue
        fwd, deriv = BINARY[name]
        a, b, dy = f32(30, lo=0.3, hi=2), f32(30, lo=0.3, hi=2), f32(30)
        if name != "pow":
            a = f32(30, lo=-2, hi=2)
        da, db = deriv(a.astype(np.float64), b.astype(np.float64))
        dy64 = dy.astype(np.float64)
        out = run("binary", {"a": a, "b": b, "dy": dy}, [], arg=name)
        if out:
            grad_check(f"binary {name}", fwd, [a, b], dy, [dy64 * da, dy64 * db],
                       [out["da"], out["db"]])
    # pow at a == 0: torch masks the exponent gradient to 0 for b >= 0
    a = np.zeros(4, np.float32)
    b = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    out = run("binary", {"a": a, "b": b, "dy": np.ones(4, np.float32)}, [], arg="pow")
    if out:
        expect("pow db at a=0", np.all(out["db"] == 0) and np.all(np.isfinite(out["da"])),
               f"db={out['db']} da={out['da']}")
        check("pow da at a=0", out["da"], [0.0, 1.0, 0.0, 0.0])  # b*0^(b-1); 0 where b==0


def test_sum_to_shape():
    g = f32(2, 3, 4)
    for shape in ((3, 1), (1,), (), (2, 1, 4), (4,), (2, 3, 4), (1, 1, 1), (3, 4)):
        # independent oracle: numpy's own broadcast + sum over the axes where
        # the broadcast view has stride 0
        axes = tuple(i for i in range(3) if i < 3 - len(shape) or shape[i - (3 - len(shape))] == 1)
        want = g.astype(np.float64).sum(axis=axes, keepdims=True).reshape(shape)
        out = run("sum_to_shape", {"g": g}, [len(shape)] + list(shape))
        if out:
            check(f"sum_to_shape {shape}", out["out"], want)
            # and it is the vector-Jacobian product of np.broadcast_to
            x = f32(*shape) if shape else np.float32(RNG.uniform())
            fd = fd_grad(lambda x: np.broadcast_to(x, g.shape), [np.asarray(x)], 0, g.astype(np.float64))
            check(f"sum_to_shape {shape} vs fd", out["out"], fd)
    rc, err, _ = run("sum_to_shape", {"g": g}, [2, 2, 4], fail=True)
    expect("sum_to_shape incompatible", rc == 3 and "does not broadcast" in err, err)


def attn_fwd(q, k, v, causal, scale):
    T, S = q.shape[1], k.shape[1]
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        i = np.arange(T)[:, None]
        j = np.arange(S)[None, :]
        s = np.where(j > i + (S - T), -np.inf, s)
    return np_softmax(s, -1) @ v


def test_attention():
    for (B, T, S, D, Dv, causal) in ((2, 4, 4, 3, 5, 1), (1, 3, 5, 4, 2, 1), (2, 3, 4, 2, 3, 0)):
        scale = 1 / math.sqrt(D)
        q, k, v, do = f32(B, T, D, lo=-2, hi=2), f32(B, S, D, lo=-2, hi=2), f32(B, S, Dv), f32(B, T, Dv)
        q64, k64, v64, do64 = (t.astype(np.float64) for t in (q, k, v, do))
        s = q64 @ np.swapaxes(k64, -1, -2) * scale
        if causal:
            s = np.where(np.arange(S)[None, :] > np.arange(T)[:, None] + (S - T), -np.inf, s)
        p = np_softmax(s, -1)
        dp = do64 @ np.swapaxes(v64, -1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        want = [ds @ k64 * scale, np.swapaxes(ds, -1, -2) @ q64 * scale,
                np.swapaxes(p, -1, -2) @ do64]
        out = run("attention", {"q": q, "k": k, "v": v, "dout": do}, [causal, scale])
        if out:
            grad_check(f"attention B={B} T={T} S={S} causal={causal}",
                       lambda q, k, v, c=causal, sc=scale: attn_fwd(q, k, v, c, sc),
                       [q, k, v], do, want, [out["dq"], out["dk"], out["dv"]])


def test_embedding():
    V, D = 7, 3
    for i32 in (0, 1):
        ids = np.array([[1, 3, 1], [6, -1, 0]], dtype=np.int32 if i32 else np.int64)
        dy = f32(2, 3, D)
        want = np.zeros((V, D))
        for i, t in enumerate(ids.reshape(-1)):  # brute-force scatter
            want[t % V] += dy.reshape(-1, D)[i]
        out = run("embedding", {"ids": ids, "dy": dy}, [V, 0, i32])
        if out:
            check(f"embedding i32={i32}", out["dtable"].reshape(V, D), want)
        t0 = f32(V, D)
        out = run("embedding", {"ids": ids, "dy": dy, "dtable_in": t0}, [V, 1, i32])
        if out:
            check(f"embedding accum i32={i32}", out["dtable"].reshape(V, D), t0 + want)
    for bad in (V, -V - 1, 1 << 40):
        ids = np.array([0, bad, 2], dtype=np.int64)
        t0 = f32(V, D)
        rc, err, outs = run("embedding", {"ids": ids, "dy": f32(3, D), "dtable_in": t0},
                            [V, 1, 0], fail=True)
        expect(f"embedding id {bad} rejected", rc == 3 and "outside" in err, f"rc={rc} {err}")
        expect(f"embedding id {bad} leaves dtable", "dtable" in outs and
               np.array_equal(outs["dtable"].reshape(V, D), t0), "dtable changed")


# ------------------------------------------------------------------ loss
def ce_np(logits, t, ignore):
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    keep = t != ignore if ignore is not None else np.ones(len(t), bool)
    tt = np.where(keep, t, 0)
    per = lse - logits[np.arange(len(t)), tt]
    cnt = keep.sum()
    return (per[keep].sum() / cnt if cnt else math.nan), lse, cnt


def test_cross_entropy():
    N, V = 6, 9
    for (ignore, i32, use_lse, dloss) in ((None, 0, 1, 1.0), (-100, 0, 0, 0.7),
                                         (3, 1, 1, 1.0), (-100, 1, 0, 2.0)):
        logits = f32(N, V, lo=-4, hi=4)
        t = RNG.integers(0, V, size=N)
        if ignore is not None:
            t[[1, 4]] = ignore
        t = t.astype(np.int32 if i32 else np.int64)
        lg64 = logits.astype(np.float64)
        loss, lse, cnt = ce_np(lg64, t, ignore)
        keep = t != ignore if ignore is not None else np.ones(N, bool)
        sm = np_softmax(lg64, -1)
        onehot = np.zeros((N, V))
        onehot[np.arange(N)[keep], t[keep]] = 1
        want_d = dloss * (sm - onehot) * keep[:, None] / cnt
        params = [ignore is not None, ignore if ignore is not None else 0, dloss, use_lse, i32]
        out = run("ce", {"logits": logits, "targets": t}, params)
        if not out:
            continue
        name = f"ce ignore={ignore} i32={i32} lse={use_lse}"
        check(name + " loss", out["loss"], loss)
        check(name + " lse", out["lse"], lse)
        expect(name + " count", int(out["count"]) == cnt, f"{out['count']} != {cnt}")
        fd = fd_grad(lambda lg: np.array(ce_np(lg, t, ignore)[0]), [logits], 0, np.array(dloss))
        check(name + " numpy-vs-fd", want_d, fd, rtol=1e-6, atol=1e-7)
        check(name + " dlogits", out["dlogits"], want_d)
        check(name + " dlogits-vs-fd", out["dlogits"], fd)
    # every row ignored: loss NaN (torch's 0/0), gradient zero
    t = np.full(4, -100, np.int64)
    out = run("ce", {"logits": f32(4, V), "targets": t}, [1, -100, 1.0, 1, 0])
    if out:
        expect("ce all ignored", math.isnan(float(out["loss"])) and
               np.all(out["dlogits"] == 0) and int(out["count"]) == 0, str(out["loss"]))
    for bad in (V, -1, -100):
        t = np.array([0, bad, 2], np.int64)
        rc, err, _ = run("ce", {"logits": f32(3, V), "targets": t}, [0, 0, 1.0, 1, 0], fail=True)
        expect(f"ce target {bad} rejected", rc == 3 and "outside" in err, err)


# ------------------------------------------------------------------ optim
def test_optim():
    n, steps = 50, 6
    for (lr, b1, b2, eps, wd) in ((1e-3, 0.9, 0.95, 1e-8, 0.1), (3e-2, 0.8, 0.999, 1e-6, 0.0)):
        p, g = f32(n), f32(steps, n, lo=-0.1, hi=0.1)
        out = run("adamw", {"p": p, "g": g}, [lr, b1, b2, eps, wd, 0])
        wp, wm, wv = np_oracle.adamw_np(p, list(g), lr, b1, b2, eps, wd)
        if out:
            name = f"adamw lr={lr} wd={wd}"
            check(name + " p", out["p"], wp, rtol=1e-5)
            # moments: relative to p's change, they must be exact to fp32 rounding
            check(name + " m", out["m"], wm, rtol=1e-5)
            check(name + " v", out["v"], wv, rtol=1e-5)
    # the fused AdamW op's kernel: bit-equal to the fp32 op chain it replaced,
    # and within fp32 rounding of torch.optim.AdamW (float64 transcription,
    # gradient scaled by the clip factor first); several steps from non-zero
    # state, odd lengths (vector tails), in place / out of place / mixed
    for n in (1, 7, 50, 1000, 4099):
        for (lr, b1, b2, eps, wd, clip, mode) in ((1e-3, 0.9, 0.95, 1e-8, 0.1, -1.0, 0),
                                                  (3e-2, 0.8, 0.999, 1e-6, 0.0, 0.37, 1),
                                                  (6e-4, 0.9, 0.95, 1e-8, 0.1, 0.5, 2),
                                                  (1e-3, 0.9, 0.95, 1e-8, 0.0, -1.0, 1)):
            steps, step0 = 5, 3
            p, g = f32(n), f32(steps, n, lo=-0.1, hi=0.1)
            m0, v0 = f32(n, lo=-0.01, hi=0.01), f32(n, lo=0.0, hi=1e-4)
            out = run("adamw_fused", {"p": p, "g": g, "m": m0, "v": v0},
                      [lr, b1, b2, eps, wd, mode, clip, step0])
            if not out:
                continue
            name = f"adamw_fused n={n} wd={wd} clip={clip} mode={mode}"
            cs = None if clip < 0 else clip
            cp, cm, cv = np_oracle.adamw_chain_f32(p, m0, v0, list(g), lr, b1, b2, eps, wd, cs,
                                                   step0)
            for k, want in (("p", cp), ("m", cm), ("v", cv)):
                check(name + " " + k + " == op chain", out[k], want, rtol=0, atol=0)
            # float64 torch transcription from the same state at step step0
            wp = p.astype(np.float64).copy()
            wm, wv = m0.astype(np.float64), v0.astype(np.float64)
            for i, gi in enumerate(g):
                gi = gi.astype(np.float64) * (1.0 if cs is None else np.float64(np.float32(cs)))
                t = step0 + i
                wp *= 1 - lr * wd
                wm = b1 * wm + (1 - b1) * gi
                wv = b2 * wv + (1 - b2) * gi * gi
                wp -= lr / (1 - b1 ** t) * wm / (np.sqrt(wv) / math.sqrt(1 - b2 ** t) + eps)
            check(name + " p vs torch formula", out["p"], wp, rtol=1e-5)
            check(name + " m vs torch formula", out["m"], wm, rtol=1e-5)
            check(name + " v vs torch formula", out["v"], wv, rtol=1e-5)
    rc, err, _ = run("adamw_fused", {"p": f32(3), "g": f32(1, 3), "m": f32(3), "v": f32(3)},
                     [1e-3, 0.9, 0.95, 1e-8, 0, 1, -1, 0], fail=True)
    expect("adamw_fused step 0 rejected", rc == 3 and "step" in err, err)
    for (lr, mom, damp, wd, nest) in ((0.1, 0.0, 0.0, 0.0, 0), (0.05, 0.9, 0.0, 0.01, 0),
                                      (0.05, 0.9, 0.1, 0.0, 0), (0.05, 0.9, 0.0, 0.1, 1)):
        p, g = f32(n), f32(steps, n)
        out = run("sgd", {"p": p, "g": g}, [lr, mom, damp, wd, nest])
        wp, wb = np_oracle.sgd_np(p, list(g), lr, mom, damp, wd, nest)
        if out:
            name = f"sgd mom={mom} damp={damp} wd={wd} nesterov={nest}"
            check(name + " p", out["p"], wp, rtol=1e-5)
            check(name + " buf", out["m"], wb, rtol=1e-5)
    rc, err, _ = run("sgd", {"p": f32(3), "g": f32(1, 3)}, [0.1, 0.9, 0.1, 0.0, 1], fail=True)
    expect("sgd nesterov with dampening rejected", rc == 3 and "nesterov" in err, err)
    rc, err, _ = run("adamw", {"p": f32(3), "g": f32(1, 3)}, [1e-3, 0.9, 0.95, 1e-8, 0, -1],
                     fail=True)
    expect("adamw step 0 rejected", rc == 3 and "step" in err, err)
    for max_norm in (0.5, 100.0):
        gs = [f32(10), f32(3, 4), f32(7, lo=-3, hi=3)]
        total, coef = np_oracle.clip_np(gs, max_norm)
        out = run("clip", {f"g{i}": g for i, g in enumerate(gs)}, [len(gs), max_norm])
        if out:
            check(f"clip {max_norm} norm", out["norm"], total, rtol=1e-12)
            check(f"clip {max_norm} scale", out["scale"], coef, rtol=1e-12)
            for i, g in enumerate(gs):
                check(f"clip {max_norm} g{i}", out[f"g{i}"], g.reshape(-1).astype(np.float64) * coef)
    x, y = f32(20), f32(20)
    out = run("axpy", {"x": x, "y": y}, [0.25])
    if out:
        check("axpy", out["y"], y.astype(np.float64) + 0.25 * x)
    # lr schedules vs nanoGPT's get_lr (and constant)
    for (W, Dd, ratio) in ((5, 30, 0.1), (0, 10, 0.0), (3, 3, 0.1)):
        n_steps = 40
        out = run("lr", {}, [1, 6e-4, W, Dd, ratio, n_steps])
        if out:
            if Dd > W:
                want = [np_oracle.nanogpt_get_lr(i, 6e-4, W, Dd, 6e-4 * ratio) for i in range(n_steps)]
            else:  # documented: no decay span -> max lr after warm-up
                want = [6e-4 * (i + 1) / (W + 1) if i < W else 6e-4 for i in range(n_steps)]
            check(f"lr cosine W={W} D={Dd}", out["lr"], want, rtol=1e-12, atol=0)
    out = run("lr", {}, [0, 1e-3, 5, 30, 0.1, 10])
    if out:
        check("lr constant", out["lr"], [1e-3] * 10, rtol=0, atol=0)


# ------------------------------------------------------------------ data
def write_llmc(path, toks, version=1, count=None, extra=b""):
    hdr = np.zeros(256, np.int32)
    hdr[0], hdr[1], hdr[2] = 20240520, version, len(toks) if count is None else count
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(np.asarray(toks, np.uint16).tobytes())
        f.write(extra)


def test_data():
    with tempfile.TemporaryDirectory() as d:
        toks = RNG.integers(0, 50257, size=103).astype(np.uint16)
        llmc, nano = os.path.join(d, "a.bin"), os.path.join(d, "b.bin")
        write_llmc(llmc, toks)
        toks.tofile(nano)
        B, T = 4, 5
        steps = 12  # (103-1)//20 = 5 batches: wraps twice
        for path, is_llmc in ((llmc, 1), (nano, 0)):
            for i32 in (0, 1):
                out = run("data", {}, [B, T, 0, 1, steps, i32, 1 - is_llmc], arg=path)
                if not out:
                    continue
                name = f"data {'llmc' if is_llmc else 'nanogpt'} i32={i32}"
                expect(name + " info", list(out["info"]) == [is_llmc, 103, 5], str(out["info"]))
                expect(name + " dtype", out["inputs"].dtype == (np.int32 if i32 else np.int64),
                       str(out["inputs"].dtype))
                for s in range(steps):
                    wi, wt = np_oracle.llmc_batch(toks, s, B, T)
                    expect(f"{name} step {s}", np.array_equal(out["inputs"][s], wi) and
                           np.array_equal(out["targets"][s], wt), "batch differs")
            # rank-aware: each rank's rows, and together the single-process batch
            full = run("data", {}, [B, T, 0, 1, steps, 0, 1 - is_llmc], arg=path)
            parts = []
            for r in range(2):
                out = run("data", {}, [B, T, r, 2, steps, 0, 1 - is_llmc], arg=path)
                if not out:
                    continue
                parts.append(out)
                for s in range(steps):
                    wi, wt = np_oracle.llmc_batch(toks, s, B, T, rank=r, size=2)
                    expect(f"data rank {r}/2 step {s}", np.array_equal(out["inputs"][s], wi) and
                           np.array_equal(out["targets"][s], wt), "batch differs")
            if full and len(parts) == 2:
                expect("data ranks concatenate", np.array_equal(
                    np.concatenate([p["inputs"] for p in parts], 1), full["inputs"]) and
                    np.array_equal(np.concatenate([p["targets"] for p in parts], 1),
                                   full["targets"]), "rank rows differ from full batch")
            # uneven DP: 3 ranks over B = 4 rows read 2, 1 and 1 rows (rt_row_split),
            # together the single-process batch
            parts = [run("data", {}, [B, T, r, 3, steps, 0, 1 - is_llmc], arg=path)
                     for r in range(3)]
            if full and all(parts):
                expect("data uneven ranks: rows 2, 1, 1",
                       [p["inputs"][0].size for p in parts] == [2 * T, T, T],
                       str([p["inputs"].shape for p in parts]))
                expect("data uneven ranks concatenate", np.array_equal(
                    np.concatenate([p["inputs"] for p in parts], 1), full["inputs"]) and
                    np.array_equal(np.concatenate([p["targets"] for p in parts], 1),
                                   full["targets"]), "uneven rank rows differ from full batch")
        # exactly B*T+1 tokens: one batch, every step the same
        small = os.path.join(d, "small.bin")
        write_llmc(small, toks[:B * T + 1])
        out = run("data", {}, [B, T, 0, 1, 3, 0], arg=small)
        if out:
            expect("data one batch repeats", all(np.array_equal(out["inputs"][s], toks[:B * T])
                                                 for s in range(3)), "")
        # malformed files -> clear errors
        cases = []
        p = os.path.join(d, "ver.bin")
        write_llmc(p, toks, version=2)
        cases.append((p, "version 2"))
        p = os.path.join(d, "count.bin")
        write_llmc(p, toks, count=500)
        cases.append((p, "beyond file size"))
        p = os.path.join(d, "trail.bin")
        write_llmc(p, toks, extra=b"\0\0")
        cases.append((p, "trailing bytes"))
        p = os.path.join(d, "zero.bin")
        write_llmc(p, [], count=0)
        cases.append((p, "not positive"))
        raw = set()  # files read with --data-format raw-u16
        p = os.path.join(d, "odd.bin")
        with open(p, "wb") as f:
            f.write(toks.tobytes() + b"\1")
        cases.append((p, "even byte length"))
        raw.add(p)
        p = os.path.join(d, "short.bin")
        with open(p, "wb") as f:
            f.write(np.array([20240520, 1, 3], np.int32).tobytes())
        cases.append((p, "shorter than the 1024-byte header"))
        p = os.path.join(d, "empty.bin")
        open(p, "wb").close()
        cases.append((p, "empty"))
        p = os.path.join(d, "few.bin")
        write_llmc(p, toks[:B * T])
        cases.append((p, "too few for one batch"))
        p = os.path.join(d, "fewnano.bin")
        toks[:B * T].tofile(p)
        cases.append((p, "too few for one batch"))
        raw.add(p)
        # the magic is required (issue 16 item 13): an llm.c-sized header with
        # a damaged magic used to train as 512 tokens; a headerless file
        # needs the raw format, and an llm.c file is refused in it
        p = os.path.join(d, "badmagic.bin")
        write_llmc(p, toks)
        with open(p, "r+b") as f:
            f.write(np.array([20240521], np.int32).tobytes())
        cases.append((p, "first int32 is 20240521, not the magic 20240520"))
        cases.append((nano, "needs --data-format raw-u16"))
        p = os.path.join(d, "llmc_as_raw.bin")
        write_llmc(p, toks)
        cases.append((p, "starts with the llm.c magic"))
        raw.add(p)
        cases.append((os.path.join(d, "missing.bin"), "No such file"))
        cases.append((d, "not a regular file"))
        for path, msg in cases:
            rc, err, _ = run("data", {}, [B, T, 0, 1, 1, 0, int(path in raw)], arg=path, fail=True)
            expect(f"data error {os.path.basename(path)}",
                   rc == 3 and msg in err and path in err, f"rc={rc} {err.strip()}")
        rc, err, _ = run("data", {}, [1, T, 0, 2, 1, 0], arg=llmc, fail=True)
        expect("data B below dp", rc == 3 and "without a row" in err, err)
        rc, err, _ = run("data", {}, [B, T, 2, 2, 1, 0], arg=llmc, fail=True)
        expect("data rank out of range", rc == 3 and "out of range" in err, err)


def test_data_matches_references():
    """The committed training references (tools/torch_reference.py, llm.c
    batching in Python) and the C loader agree on examples/tiny_corpus.bin."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    corpus = os.path.join(root, "examples", "tiny_corpus.bin")
    refs = [os.path.join(root, "tests", "models", m + ".train_ref.npz") for m in ("gpt2", "llama")]
    refs = [r for r in refs if os.path.exists(r)]
    expect("training references present", os.path.exists(corpus) and refs,
           "examples/tiny_corpus.bin or tests/models/*.train_ref.npz missing")
    for r in refs:
        z = np.load(r)
        steps, B, T = z["inputs"].shape
        out = run("data", {}, [B, T, 0, 1, steps, 0], arg=corpus)
        if out:
            expect(f"{os.path.basename(r)} batches", np.array_equal(
                out["inputs"].reshape(steps, B, T), z["inputs"]) and np.array_equal(
                out["targets"].reshape(steps, B, T), z["targets"]), "differ from the C loader")


GROUPS = {
    "grads": [test_matmul, test_linear, test_norms, test_softmax, test_unary, test_binary,
              test_sum_to_shape, test_attention, test_embedding],
    "loss": [test_cross_entropy],
    "optim": [test_optim],
    "data": [test_data, test_data_matches_references],
}


def main():
    group = sys.argv[2] if len(sys.argv) > 2 else "all"
    tests = sum(GROUPS.values(), []) if group == "all" else GROUPS[group]
    for t in tests:
        t()
    for f in FAILS:
        print("FAIL", f)
    print(f"{CHECKS[0]} checks, {len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
