"""numpy re-implementations of the torch optimizer / clipping formulas and of
llm.c's and nanoGPT's batching and lr schedule.  The C kernels are tested
against these in CI; verify_torch.py (run by hand, needs torch) checks these
against torch itself."""
import math

import numpy as np


def adamw_np(p, grads, lr, b1, b2, eps, wd):
    """torch.optim.AdamW(amsgrad=False) steps 1..len(grads), in float64."""
    p = p.astype(np.float64).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for step, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        p *= 1 - lr * wd
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v) / math.sqrt(1 - b2 ** step) + eps
        p -= lr / (1 - b1 ** step) * m / denom
    return p, m, v


def adamw_chain_f32(p, m, v, grads, lr, b1, b2, eps, wd, clip_scale=None, step0=1):
    """The fp32 operations of the elementwise op chain passes/optimizer.c
    emitted for AdamW before the fused op (one numpy float32 op per IR node,
    each correctly rounded; Pow evaluated in float64 as the host kernel
    does).  The fused kernel must equal it bit for bit."""
    f = np.float32
    p, m, v = (np.asarray(x, np.float32).copy() for x in (p, m, v))
    lr = f(lr)
    for i, g in enumerate(grads):
        g = np.asarray(g, np.float32)
        if clip_scale is not None:
            g = g * f(clip_scale)
        t = f(step0 + i)
        bc1 = f(1) - f(np.power(np.float64(f(b1)), np.float64(t)))
        bc2 = f(1) - f(np.power(np.float64(f(b2)), np.float64(t)))
        step_size = lr / bc1
        bc2_sqrt = np.sqrt(bc2)
        m = m * f(b1) + g * f(1 - b1)
        v = v * f(b2) + (g * g) * f(1 - b2)
        den = np.sqrt(v) / bc2_sqrt + f(eps)
        upd = (m / den) * step_size
        p0 = p * (f(1) - lr * f(wd)) if wd != 0 else p
        p = p0 - upd
    return p, m, v


def sgd_np(p, grads, lr, momentum, dampening, wd, nesterov):
    """torch.optim.SGD steps, in float64."""
    p = p.astype(np.float64).copy()
    buf = None
    for g in grads:
        d = g.astype(np.float64) + wd * p
        if momentum != 0:
            buf = d.copy() if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p -= lr * d
    return p, (np.zeros_like(p) if buf is None else buf)


def clip_np(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_(norm_type=2): (total_norm, factor)."""
    total = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    coef = max_norm / (total + 1e-6)
    return total, min(coef, 1.0)


def nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT train.py get_lr, transcribed."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def llmc_batch(tokens, step, B, T, rank=0, size=1):
    """llm.c dataloader_next_batch on one shard, no shuffle, with
    num_processes=size and local B = B // size: (inputs, targets) of rank."""
    Bl = B // size
    num_samples = (len(tokens) - 1) // (size * Bl * T)
    idx = step % num_samples
    off = idx * size * Bl * T + rank * Bl * T
    buf = tokens[off:off + Bl * T + 1].astype(np.int64)
    return buf[:-1], buf[1:]
