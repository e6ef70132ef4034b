"""Host-executor cases of the training ops (ir/ops.def "training" section),
numpy oracles.  tests/kernels/test_kernels.py executes this file with its
case(), I, C, rnd, i64 and np in scope, so its every-op-has-a-case check
covers these ops too."""
from math import erf, sqrt, pi

f64 = np.float64


def sm(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# CrossEntropy / CrossEntropyGrad: mean over counted rows, one ignored row
lg = rnd((2, 3, 7))
tg = i64([[1, 6, -100], [0, 3, 3]])
m = tg.reshape(-1) != -100
l2 = lg.reshape(-1, 7).astype(f64)
lse = np.log(np.exp(l2).sum(-1))
rows = np.where(m)[0]
loss = np.mean(lse[rows] - l2[rows, tg.reshape(-1)[rows]])
case("CrossEntropy", [I(lg), I(tg)], [np.array(loss, np.float32)],
     {"use_ignore": 1, "ignore_index": -100})
case("CrossEntropy", [I(lg), I(i64([[1, 6, 2], [0, 3, 9]]))], [np.array(0, np.float32)],
     error="outside [0, 7)")  # a target outside [0, V) is an error, not a read past the row
dl = np.float32(0.7)
oh = np.zeros_like(l2)
oh[rows, tg.reshape(-1)[rows]] = 1
g = (sm(l2) - oh) * m[:, None] * dl / m.sum()
case("CrossEntropyGrad", [I(lg), I(tg), I(np.array(dl))], [g.reshape(lg.shape).astype(np.float32)],
     {"use_ignore": 1, "ignore_index": -100})

# LinearGrad: y = x W + b
x, w, dy = rnd((2, 3, 4)), rnd((4, 5)), rnd((2, 3, 5))
x2, dy2 = x.reshape(-1, 4).astype(f64), dy.reshape(-1, 5).astype(f64)
case("LinearGrad", [I(x), I(w), I(dy)],
     [(dy2 @ w.T.astype(f64)).reshape(x.shape).astype(np.float32),
      (x2.T @ dy2).astype(np.float32), dy2.sum(0).astype(np.float32)])

# LayerNormGrad / RMSNormGrad over the last axis
x, s, dy = rnd((2, 3, 6)), rnd((6,)), rnd((2, 3, 6))
xd, sd, gd = x.astype(f64), s.astype(f64), dy.astype(f64)
eps = 1e-5
mu = xd.mean(-1, keepdims=True)
rstd = 1 / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + eps)
xh = (xd - mu) * rstd
gg = gd * sd
dx = rstd * (gg - gg.mean(-1, keepdims=True) - xh * (gg * xh).mean(-1, keepdims=True))
case("LayerNormGrad", [I(x), I(s), I(dy)],
     [dx.astype(np.float32), (gd * xh).reshape(-1, 6).sum(0).astype(np.float32),
      gd.reshape(-1, 6).sum(0).astype(np.float32)], {"axis": -1, "epsilon": eps})
r = 1 / np.sqrt((xd ** 2).mean(-1, keepdims=True) + eps)
dx = r * gg - xd * r ** 3 * (gg * xd).mean(-1, keepdims=True)
case("RMSNormGrad", [I(x), I(s), I(dy)],
     [dx.astype(np.float32), (gd * xd * r).reshape(-1, 6).sum(0).astype(np.float32)],
     {"axis": -1, "epsilon": eps})

# AttentionGrad (causal, T == S)
q, k, v, do = rnd((2, 4, 3)), rnd((2, 4, 3)), rnd((2, 4, 5)), rnd((2, 4, 5))
qd, kd, vd, dod = (a.astype(f64) for a in (q, k, v, do))
sc = 0.5
S = qd @ kd.transpose(0, 2, 1) * sc + np.triu(np.full((4, 4), -np.inf), 1)
P = sm(S)
dv = P.transpose(0, 2, 1) @ dod
dP = dod @ vd.transpose(0, 2, 1)
dS = P * (dP - (dP * P).sum(-1, keepdims=True))
case("AttentionGrad", [I(q), I(k), I(v), I(do)],
     [(sc * dS @ kd).astype(np.float32), (sc * dS.transpose(0, 2, 1) @ qd).astype(np.float32),
      dv.astype(np.float32)], {"causal": 1, "scale": sc})

# UnaryGrad: silu (with y) and gelu (recomputed)
x, dy = rnd((3, 4)), rnd((3, 4))
xd = x.astype(f64)
sg = 1 / (1 + np.exp(-xd))
case("UnaryGrad", [I(x), I(dy), I((xd * sg).astype(np.float32))],
     [(dy * sg * (1 + xd * (1 - sg))).astype(np.float32)], {"fn": "silu"})
Phi = 0.5 * (1 + np.vectorize(erf)(xd / sqrt(2)))
phi = np.exp(-xd * xd / 2) / sqrt(2 * pi)
case("UnaryGrad", [I(x), I(dy)], [(dy * (Phi + xd * phi)).astype(np.float32)], {"fn": "gelu"})

# SoftmaxGrad along axis 1
y = sm(rnd((2, 5, 3)).astype(f64), 1)
dy = rnd((2, 5, 3)).astype(f64)
case("SoftmaxGrad", [I(y.astype(np.float32)), I(dy.astype(np.float32))],
     [(y * (dy - (dy * y).sum(1, keepdims=True))).astype(np.float32)], {"axis": 1, "log": 0})

# EmbeddingGrad: repeated ids accumulate
tab = rnd((6, 3))
ids = i64([[5, 1], [5, 0]])
dy = rnd((2, 2, 3))
dt = np.zeros((6, 3), f64)
np.add.at(dt, ids.reshape(-1), dy.reshape(-1, 3).astype(f64))
case("EmbeddingGrad", [I(tab), I(ids), I(dy)], [dt.astype(np.float32)])

# SumToShape: [2,3,4] -> [3,1]
g = rnd((2, 3, 4))
case("SumToShape", [I(g), C(i64([3, 1]))],
     [g.astype(f64).sum(axis=(0, 2)).reshape(3, 1).astype(np.float32)])

# SliceGrad: x[1:3, 1::2] of a [4,6] input
dy = rnd((2, 3))
dx = np.zeros((4, 6), np.float32)
dx[1:3, 1::2] = dy
case("SliceGrad", [I(dy), C(i64([4, 6])), C(i64([1, -5])), C(i64([3, 6])), C(i64([0, 1])),
                   C(i64([1, 2]))], [dx])
# extreme steps: x[1::2**63-1, 4::-2**63] takes one element per axis
dy = rnd((1, 1))
dx = np.zeros((4, 6), np.float32)
dx[1::2 ** 63 - 1, 4::-2 ** 63] = dy
case("SliceGrad", [I(dy), C(i64([4, 6])), C(i64([1, 4])), C(i64([4, -2 ** 63])), C(i64([0, 1])),
                   C(i64([2 ** 63 - 1, -2 ** 63]))], [dx])


# Vocabulary-parallel loss (passes/tp_shard_vocab.c): one rank's columns
# [st, st + Vl) of V = 7 logits, M the row max of the WHOLE row (what the
# all-reduce max gives), targets inside, outside the slice, ignored
lg = rnd((2, 3, 7))
tg = i64([[1, 6, -100], [4, 3, 5]])
st, Vl = 3, 3
va = {"vocab_start": st, "vocab_size": 7, "use_ignore": 1, "ignore_index": -100}
z = lg.reshape(-1, 7).astype(f64)
M = z.max(-1)
t1 = tg.reshape(-1)
loc = z[:, st:st + Vl]
own = (t1 >= st) & (t1 < st + Vl)
stats = np.stack([np.exp(loc - M[:, None]).sum(-1),
                  np.where(own, z[np.arange(6), np.clip(t1, 0, 6)], 0)], -1)
case("VocabCeStats", [I(lg[..., st:st + Vl].copy()), I(tg), I(M.reshape(2, 3).astype(np.float32))],
     [stats.reshape(2, 3, 2).astype(np.float32)], va)
# the loss from the summed (whole-row) stats: mean of M + log S - z_t
m = t1 != -100
full = np.stack([np.exp(z - M[:, None]).sum(-1), z[np.arange(6), np.clip(t1, 0, 6)]], -1)
loss = np.mean((M + np.log(full[:, 0]) - full[:, 1])[m])
fs = full.reshape(2, 3, 2).astype(np.float32)
Mf = M.reshape(2, 3).astype(np.float32)
case("VocabCrossEntropy", [I(lg[..., st:st + Vl].copy()), I(tg), I(Mf), I(fs)],
     [np.array(loss, np.float32)], va)
dl = np.float32(0.7)
oh = np.zeros_like(z)
oh[np.where(m)[0], t1[m]] = 1
g = ((sm(z) - oh) * m[:, None] * dl / m.sum())[:, st:st + Vl]
case("VocabCrossEntropyGrad", [I(lg[..., st:st + Vl].copy()), I(tg), I(Mf), I(fs), I(np.array(dl))],
     [g.reshape(2, 3, Vl).astype(np.float32)], va)
case("VocabCeStats", [I(lg[..., st:st + Vl].copy()), I(i64([[1, 7, 2], [0, 3, 5]])), I(Mf)],
     [np.zeros((2, 3, 2), np.float32)], va, error="outside [0, 7)")

# vocab-parallel Embedding / EmbeddingGrad: rows [2, 5) of a 6-row table;
# other ranks' ids give 0 rows / no gradient
tab = rnd((6, 3))
ids = i64([[5, 1], [2, -2]])  # -2 is row 4
lo = tab[2:5]
want = np.zeros((2, 2, 3), np.float32)
for k, i in enumerate(ids.reshape(-1)):
    r = (i + 6 if i < 0 else i) - 2
    if 0 <= r < 3:
        want.reshape(-1, 3)[k] = lo[r]
ea = {"vocab_start": 2, "vocab_size": 6}
case("Embedding", [C(lo), I(ids)], [want], ea)
dy = rnd((2, 2, 3))
dt = np.zeros((3, 3), f64)
for k, i in enumerate(ids.reshape(-1)):
    r = (i + 6 if i < 0 else i) - 2
    if 0 <= r < 3:
        dt[r] += dy.reshape(-1, 3)[k]
case("EmbeddingGrad", [I(lo), I(ids), I(dy)], [dt.astype(np.float32)], ea)
case("Embedding", [C(lo), I(i64([[0, 6]]))], [want[:1]], ea, error="outside")

# GatherGrad / GatherNDGrad / GatherElementsGrad: the forward gather's reads
# added back (np.add.at accumulates repeated indices)
x = rnd((2, 5, 3))
ids = i64([[4, 1], [-1, 0]])
dy = rnd((2, 2, 2, 3))
dx = np.zeros(x.shape, f64)
np.add.at(dx, (slice(None), ids % 5), dy.astype(f64))
case("GatherGrad", [I(dy), C(i64(x.shape)), C(ids)], [dx.astype(np.float32)], {"axis": 1})
dy0 = rnd((2, 2, 5, 3))
dx = np.zeros(x.shape, f64)
np.add.at(dx, ids % 2, dy0.astype(f64))
case("GatherGrad", [I(dy0), C(i64(x.shape)), C(ids % 2)], [dx.astype(np.float32)], {"axis": -3})
case("GatherGrad", [I(dy), C(i64(x.shape)), C(i64([[5, 0], [0, 0]]))], [dx.astype(np.float32)],
     {"axis": 1}, error="out of range")
x = rnd((2, 3, 4))
for b, idx in [(0, i64([[1, 2], [1, -1], [1, 2]])), (1, i64([[[2], [2]], [[0], [-1]]])),
               (0, i64([[0, 1, 2], [0, 1, 2]]))]:
    out_shape = idx.shape[:-1] + x.shape[b + idx.shape[-1]:]
    dy = rnd(out_shape)
    dx = np.zeros(x.shape, f64)
    for t in np.ndindex(*idx.shape[:-1]):
        pos = tuple(t[:b]) + tuple(int(v) % x.shape[b + j] for j, v in enumerate(idx[t]))
        dx[pos] += dy[t]
    case("GatherNDGrad", [I(dy), C(i64(x.shape)), C(idx)], [dx.astype(np.float32)],
         {"batch_dims": b})
x = rnd((3, 4))
idx = i64([[0, 3, 3, -1, 1], [2, 2, 0, 0, 1]])
dy = rnd(idx.shape)
dx = np.zeros(x.shape, f64)
for (i, j), v in np.ndenumerate(idx):
    dx[i, v % 4] += dy[i, j]
case("GatherElementsGrad", [I(dy), C(i64(x.shape)), C(idx)], [dx.astype(np.float32)], {"axis": 1})
dx = np.zeros(x.shape, f64)
idx0 = i64([[2, 0, 0, 1], [2, 2, -1, 0]])
dy = rnd(idx0.shape)
for (i, j), v in np.ndenumerate(idx0):
    dx[v % 3, j] += dy[i, j]
case("GatherElementsGrad", [I(dy), C(i64(x.shape)), C(idx0)], [dx.astype(np.float32)], {"axis": 0})

# AdamW (the fused optimizer step, ir/ops.def): torch.optim.AdamW's formula
# in float64 from a non-zero state, the gradient scaled by clip_scale first
def adamw_ref(p, m, v, g, lr, step, cs, b1, b2, eps, wd):
    p, m, v = (a.astype(f64) for a in (p, m, v))
    g = g.astype(f64) * (1.0 if cs is None else f64(np.float32(cs)))
    p = p * (1 - f64(np.float32(lr)) * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - f64(np.float32(lr)) / (1 - b1 ** step) * m / (np.sqrt(v) / sqrt(1 - b2 ** step) + eps)
    return [a.astype(np.float32) for a in (p, m, v)]


for shape, lr, step, cs, wd in (((3, 5), 1e-3, 1, None, 0.1), ((17,), 3e-2, 4, 0.25, 0.0),
                                ((2, 3, 4), 6e-4, 7, 1.0, 0.1)):
    p, m, v, g = rnd(shape), rnd(shape, lo=-0.1, hi=0.1), rnd(shape, lo=0, hi=0.01), rnd(shape)
    ins = [I(p), I(m), I(v), I(g), I(np.array(lr, np.float32)), I(np.array(step, np.int64))]
    if cs is not None:
        ins.append(I(np.array(cs, np.float32)))
    case("AdamW", ins, adamw_ref(p, m, v, g, lr, step, cs, 0.9, 0.95, 1e-8, wd),
         {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": wd})
p = rnd((4,))
case("AdamW", [I(p), I(p), I(np.abs(p)), I(p), I(np.array(1e-3, np.float32)),
               I(np.array(0, np.int64))], [p, p, p],
     {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}, error="step must be >= 1")
