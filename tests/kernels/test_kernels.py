"""Host executor kernels against numpy / onnxruntime.

Writes one case per (op, dtype, shape variant) into a temporary directory
(inputs and oracle outputs as .npy, plus a case file), then runs every case
through kernel_check, which builds the one-node IrGraph, runs hexec_run
(and hexec_eval_node for some) and compares.  Also fails if any op of
ir/ops.def has no case.

    test_kernels.py KERNEL_CHECK SOURCE_DIR
"""
import atexit
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

KC, SRC = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(1234)
cases = []
covered = set()
tmp = tempfile.mkdtemp(prefix="hetc_kernels_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends


def rnd(shape, dt=np.float32, lo=-2.0, hi=2.0):
    if np.dtype(dt) == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(int(lo) if lo > -100 else -100, int(hi) + 1, size=shape).astype(dt)
    return rng.uniform(lo, hi, size=shape).astype(dt)


def case(op, ins, outs, attrs=None, tol=None, error=None, ev=False):
    """ins: list of ('in'|'const', array) or None; outs: oracle arrays."""
    covered.add(op)
    d = os.path.join(tmp, "c%04d" % len(cases))
    os.mkdir(d)
    lines = ["op " + op]
    for k, v in (attrs or {}).items():
        if isinstance(v, str):
            lines.append("attr_s %s %s" % (k, v))
        elif isinstance(v, bool) or isinstance(v, (int, np.integer)):
            lines.append("attr_i %s %d" % (k, int(v)))
        elif isinstance(v, float):
            lines.append("attr_f %s %r" % (k, v))
        elif all(isinstance(x, (int, np.integer)) for x in v):
            lines.append("attr_ints %s %s" % (k, " ".join(str(int(x)) for x in v)))
        else:
            lines.append("attr_floats %s %s" % (k, " ".join(repr(float(x)) for x in v)))
    for i, item in enumerate(ins):
        if item is None:
            lines.append("none")
            continue
        kind, arr = item
        np.save(os.path.join(d, "in%d.npy" % i), np.ascontiguousarray(arr))
        lines.append("%s in%d.npy" % (kind, i))
    for i, arr in enumerate(outs):
        np.save(os.path.join(d, "out%d.npy" % i), np.ascontiguousarray(arr))
        lines.append("out out%d.npy" % i)
    if tol:
        lines.append("tol %g %g" % tol)
    if error:
        lines.append("error " + error)
    if ev:
        lines.append("eval")
    path = os.path.join(d, "case.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    cases.append(path)


I = lambda a: ("in", a)
C = lambda a: ("const", a)
i64 = lambda v: np.array(v, dtype=np.int64)

# ------------------------------------------------------------- binary
BCAST = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)),
         ((2, 1, 3), (4, 1)), ((1,), (3, 0))]
NUM = [np.float32, np.float64, np.int32, np.int64]


def trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return (np.sign(a) * np.sign(b) * q).astype(a.dtype)


for dt in NUM:
    for sa, sb in BCAST:
        a, b = rnd(sa, dt, -9, 9), rnd(sb, dt, -9, 9)
        is_int = np.issubdtype(dt, np.integer)
        if is_int:
            b[b == 0] = 3
        else:
            b[np.abs(b) < 0.1] = 0.5
        case("Add", [I(a), I(b)], [a + b], ev=True)
        case("Sub", [I(b), C(a)], [b - a])
        case("Mul", [I(a), I(b)], [a * b])
        case("Div", [I(a), I(b)], [trunc_div(a, b) if is_int else (a / b).astype(dt)])
        case("Max", [I(a), I(b)], [np.maximum(a, b)])
        case("Min", [I(a), I(b)], [np.minimum(a, b)])
        for name, fn in [("Equal", np.equal), ("Less", np.less), ("LessOrEqual", np.less_equal),
                         ("Greater", np.greater), ("GreaterOrEqual", np.greater_equal)]:
            bb = b.copy()
            if bb.size and a.size:  # make some elements equal
                bb.flat[0] = a.flat[0]
            case(name, [I(a), I(bb)], [fn(a, bb)])
        if is_int:
            case("Mod", [I(a), I(b)], [np.mod(a, b)])  # Python sign rule (fmod=0)
            case("Mod", [I(a), I(b)], [np.fmod(a, b)], {"fmod": 1})
        else:
            case("Mod", [I(a), I(b)], [np.fmod(a, b)], {"fmod": 1})
# variadic Max/Min with three inputs
a, b, c = rnd((2, 1, 3)), rnd((4, 1)), rnd((3,))
case("Max", [I(a), I(b), I(c)], [np.maximum(np.maximum(a, b), c)])
case("Min", [I(a), I(b), I(c)], [np.minimum(np.minimum(a, b), c)])
case("Max", [I(a)], [a])
# Pow: float bases, int exponents, int bases
a = rnd((3, 4), np.float32, 0.1, 3)
e = rnd((4,), np.float32, -2, 2)
case("Pow", [I(a), I(e)], [np.power(a.astype(np.float64), e).astype(np.float32)])
e = rnd((3, 1), np.int64, 0, 3)
case("Pow", [I(a), I(e)], [np.power(a.astype(np.float64), e).astype(np.float32)])
ai = rnd((5,), np.int64, -4, 4)
case("Pow", [I(ai), I(i64([2, 3, 0, 1, 2]))], [ai ** i64([2, 3, 0, 1, 2])])
# logical
for sa, sb in BCAST[:5]:
    a, b = rnd(sa, np.bool_), rnd(sb, np.bool_)
    case("And", [I(a), I(b)], [a & b])
    case("Or", [I(a), I(b)], [a | b])
    case("Xor", [I(a), I(b)], [a ^ b])
    case("Equal", [I(a), I(b)], [a == b])
# Where (bool cond, several dtypes, three-way broadcast)
for dt in NUM + [np.bool_]:
    cnd, x, y = rnd((2, 1, 4), np.bool_), rnd((3, 1), dt, -9, 9), rnd((4,), dt, -9, 9)
    case("Where", [I(cnd), I(x), I(y)], [np.where(cnd, x, y)])
# integer division by zero is an error, not a crash
case("Div", [I(i64([1, 2])), I(i64([1, 0]))], [i64([0, 0])], error="division by zero")
case("Mod", [I(i64([1, 2])), I(i64([0, 1]))], [i64([0, 0])], error="division by zero")
case("Add", [I(rnd((2, 3))), I(rnd((4,)))], [rnd((2, 3))], error="broadcast")

# ------------------------------------------------------------- unary
x = rnd((3, 5, 7), np.float64, -3, 3)
pos = np.abs(x) + 0.1
erf = np.vectorize(math.erf)
sig = lambda v: 1 / (1 + np.exp(-v))
UN = {"Neg": (x, -x), "Abs": (x, np.abs(x)), "Sqrt": (pos, np.sqrt(pos)),
      "Reciprocal": (pos, 1 / pos), "Exp": (x, np.exp(x)), "Log": (pos, np.log(pos)),
      "Sin": (x, np.sin(x)), "Cos": (x, np.cos(x)), "Tanh": (x, np.tanh(x)),
      "Sigmoid": (x, sig(x)), "Erf": (x, erf(x)), "Relu": (x, np.maximum(x, 0)),
      "Floor": (x, np.floor(x)), "Ceil": (x, np.ceil(x)),
      "Gelu": (x, 0.5 * x * (1 + erf(x / math.sqrt(2)))), "SiLU": (x, x * sig(x))}
for op, (xin, y) in UN.items():
    for dt in (np.float32, np.float64):
        case(op, [I(xin.astype(dt))], [y.astype(dt)], ev=(dt == np.float32))
case("Gelu", [I(x.astype(np.float32))],
     [(0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))).astype(np.float32)],
     {"approximate": "tanh"})
case("Sigmoid", [I(np.array([-800.0, 800.0, 0.0]))], [np.array([0.0, 1.0, 0.5])])
for dt in (np.int32, np.int64):
    xi = rnd((4, 6), dt, -50, 50)
    case("Neg", [I(xi)], [-xi])
    case("Abs", [I(xi)], [np.abs(xi)])
    case("Relu", [I(xi)], [np.maximum(xi, 0)])
b = rnd((3, 4), np.bool_)
case("Not", [I(b)], [~b])
for dt in NUM + [np.bool_]:
    xi = rnd((2, 3, 4), dt, -9, 9)
    case("Identity", [I(xi)], [xi])
xf = rnd((4, 5))
# TP collectives on one process = one rank: the identity (ir/ops.def)
case("TpAllReduce", [I(xf)], [xf], {"tp": 2})
case("TpCopy", [I(xf)], [xf], {"tp": 4})
case("Dropout", [I(xf)], [xf])
case("Dropout", [I(xf), C(np.array(0.3, np.float32)), C(np.array(False))],
     [xf, np.ones((4, 5), np.bool_)])
# Clip: both, min only, max only, ints
for dt in NUM:
    xc = rnd((3, 7), dt, -9, 9)
    lo, hi = np.array(-2, dt), np.array(3, dt)
    case("Clip", [I(xc), C(lo), C(hi)], [np.clip(xc, lo, hi)])
    case("Clip", [I(xc), C(lo)], [np.maximum(xc, lo)])
    case("Clip", [I(xc), None, C(hi)], [np.minimum(xc, hi)])
    case("Clip", [I(xc)], [xc])

# ------------------------------------------------------------- Cast (onnxruntime oracle)
import onnx
from onnx import helper, TensorProto
import onnxruntime as ort

NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
           np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int8): TensorProto.INT8,
           np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int16): TensorProto.INT16,
           np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
           np.dtype(np.bool_): TensorProto.BOOL}


def ort_run(op, inputs, attrs=None, nout=1, opset=21):
    names = ["i%d" % k for k in range(len(inputs))]
    node = helper.make_node(op, names, ["o%d" % k for k in range(nout)], **(attrs or {}))
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, NP2ONNX[a.dtype], a.shape) for n, a in zip(names, inputs)],
        [helper.make_empty_tensor_value_info("o%d" % k) for k in range(nout)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, dict(zip(names, inputs)))


CASTS = [np.float32, np.float64, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_]
xc = np.concatenate([rnd((10,), np.float64, -100, 100), [0.0, -0.0, 2.5, -2.5, 1e-3]])
for src in CASTS:
    xs = xc.astype(src) if src != np.bool_ else (xc > 0)
    for dst in CASTS + [np.float16]:
        if src != np.float64 and dst == np.float16:
            continue
        want = ort_run("Cast", [xs], {"to": NP2ONNX[np.dtype(dst)]})[0]
        case("Cast", [I(xs)], [want], {"to": NP2ONNX[np.dtype(dst)]})
xh = rnd((17,), np.float64, -60000, 60000).astype(np.float16)
case("Cast", [I(xh)], [xh.astype(np.float32)], {"to": 1})
xh = (rnd((64,), np.float64, -1, 1) * np.logspace(-9, 5, 64)).astype(np.float32)
case("Cast", [I(xh)], [xh.astype(np.float16)], {"to": 10})

# ------------------------------------------------------------- linear algebra
MM = [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,)),
      ((2, 1, 4, 5), (3, 5, 6)), ((3, 4, 0), (0, 2))]
for dt in (np.float32, np.float64, np.int64, np.int32):
    for sa, sb in MM:
        a, b = rnd(sa, dt, -5, 5), rnd(sb, dt, -5, 5)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt)
        case("MatMul", [I(a), I(b)], [want], tol=(1e-5, 1e-5))
for ta in (0, 1):
    for tb in (0, 1):
        for cs in [None, (3,), (4, 1), (4, 3), ()]:
            A, B = rnd((5, 4) if ta else (4, 5)), rnd((3, 5) if tb else (5, 3))
            Cm = rnd(cs) if cs is not None else None
            A64, B64 = A.astype(np.float64), B.astype(np.float64)
            y = 0.7 * (A64.T if ta else A64) @ (B64.T if tb else B64)
            if Cm is not None:
                y = y + 1.3 * Cm
            ins = [I(A), I(B)] + ([I(Cm)] if Cm is not None else [])
            case("Gemm", ins, [y.astype(np.float32)],
                 {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.3}, tol=(1e-5, 1e-5))
for xs in [(7, 6), (2, 3, 6)]:
    xl, w, bl = rnd(xs), rnd((6, 5)), rnd((5,))
    y = xl.astype(np.float64) @ w + bl
    case("Linear", [I(xl), C(w), C(bl)], [y.astype(np.float32)], tol=(1e-5, 1e-5), ev=True)
    case("Linear", [I(xl), C(w)], [(xl.astype(np.float64) @ w).astype(np.float32)], tol=(1e-5, 1e-5))


def attention(q, k, v, causal, scale):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale
    T, S = q.shape[-2], k.shape[-2]
    if causal:
        mask = np.arange(S)[None, :] > np.arange(T)[:, None] + (S - T)
        s = np.where(mask, -np.inf, s)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return (p @ v).astype(np.float32)


# (1, 2, 4, 600, ...): rows past the kernel's 512-key buffer (hk_matmul.c)
for (B, H, T, S, D, Dv) in [(2, 3, 5, 5, 4, 4), (1, 2, 3, 7, 8, 5), (2, 1, 6, 6, 16, 16),
                            (1, 2, 4, 600, 8, 8)]:
    q, k, v = rnd((B, H, T, D)), rnd((B, H, S, D)), rnd((B, H, S, Dv))
    case("Attention", [I(q), I(k), I(v)], [attention(q, k, v, 1, 1 / math.sqrt(D))],
         tol=(1e-5, 1e-5))
    case("Attention", [I(q), I(k), I(v)], [attention(q, k, v, 0, 0.3)],
         {"causal": 0, "scale": 0.3}, tol=(1e-5, 1e-5))

# ------------------------------------------------------------- reductions
RED = [((3, 4, 5), [1]), ((3, 4, 5), [-1, 0]), ((3, 4, 5), None), ((2, 3), [0, 1]),
       ((4, 1, 6), [-2])]
for dt in NUM:
    for shp, axes in RED:
        xr = rnd(shp, dt, -9, 9)
        ax = tuple(axes) if axes is not None else None
        for keep in (0, 1):
            ins = [I(xr)] + ([C(i64(axes))] if axes is not None else [])
            at = {"keepdims": keep}
            s64 = xr.astype(np.float64)
            mean = s64.mean(axis=ax, keepdims=bool(keep))
            if np.issubdtype(dt, np.integer):
                mean = np.trunc(mean)
            case("ReduceSum", ins, [xr.sum(axis=ax, keepdims=bool(keep)).astype(dt)], at)
            case("ReduceMean", ins, [mean.astype(dt)], at)
            case("ReduceMax", ins, [xr.max(axis=ax, keepdims=bool(keep))], at)
xr = rnd((3, 4))
case("ReduceSum", [I(xr)], [xr], {"noop_with_empty_axes": 1})
case("ReduceSum", [I(xr), C(np.zeros((0,), np.int64))], [xr.sum(keepdims=True)])
case("ReduceMean", [I(xr)], [xr.mean(axis=1, keepdims=True)], {"axes": [1]})
big = rnd((1 << 16,), np.float32, 0, 1)
case("ReduceSum", [I(big)], [np.array([big.astype(np.float64).sum()], np.float32)])
for dt in (np.float32, np.float64):
    for shp, axis in [((3, 4, 5), -1), ((3, 4, 5), 1), ((3, 4, 5), 0), ((6,), 0)]:
        xs = rnd(shp, dt, -20, 20).astype(np.float64)
        e = np.exp(xs - xs.max(axis=axis, keepdims=True))
        sm = e / e.sum(axis=axis, keepdims=True)
        case("Softmax", [I(xs.astype(dt))], [sm.astype(dt)], {"axis": axis})
        case("LogSoftmax", [I(xs.astype(dt))], [np.log(sm).astype(dt)], {"axis": axis},
             tol=(1e-5, 1e-5))
case("Softmax", [I(np.array([1000.0, 0.0], np.float32))], [np.array([1.0, 0.0], np.float32)])
for dt in NUM:
    xcs = rnd((3, 4, 5), dt, -9, 9)
    for axis in (0, -1, 1):
        for excl in (0, 1):
            for rev in (0, 1):
                want = ort_run("CumSum", [xcs, i64(axis)], {"exclusive": excl, "reverse": rev})[0]
                case("CumSum", [I(xcs), C(i64(axis))], [want], {"exclusive": excl, "reverse": rev})

# ------------------------------------------------------------- normalisations
for shp, axis in [((4, 8), -1), ((2, 3, 8), -1), ((2, 3, 4), 1), ((2, 3, 4), -2)]:
    xn = rnd(shp, np.float32, -3, 3)
    nshape = shp[axis % len(shp):]
    sc, bi = rnd(nshape), rnd(nshape)
    axes = tuple(range(axis % len(shp), len(shp)))
    x64 = xn.astype(np.float64)
    mu = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=axes, keepdims=True)
    ln = (x64 - mu) / np.sqrt(var + 1e-5) * sc + bi
    case("LayerNorm", [I(xn), C(sc), C(bi)], [ln.astype(np.float32)], {"axis": axis},
         tol=(1e-5, 1e-5), ev=True)
    case("LayerNorm", [I(xn), C(sc)], [(ln - bi).astype(np.float32)],
         {"axis": axis, "epsilon": 1e-5}, tol=(1e-5, 1e-5))
    case("LayerNorm", [I(xn), C(sc.reshape((1,) * 2 + sc.shape)), C(bi)], [ln.astype(np.float32)],
         {"axis": axis}, tol=(1e-5, 1e-5))
    rms = x64 / np.sqrt((x64 ** 2).mean(axis=axes, keepdims=True) + 1e-6) * sc
    case("RMSNorm", [I(xn), C(sc)], [rms.astype(np.float32)], {"axis": axis, "epsilon": 1e-6},
         tol=(1e-5, 1e-5))
# scale broadcast over the normalised dims (one value per last axis)
xn = rnd((2, 3, 4))
sc = rnd((4,))
x64 = xn.astype(np.float64)
mu = x64.mean(axis=(1, 2), keepdims=True)
var = ((x64 - mu) ** 2).mean(axis=(1, 2), keepdims=True)
case("LayerNorm", [I(xn), C(sc)], [((x64 - mu) / np.sqrt(var + 1e-5) * sc).astype(np.float32)],
     {"axis": 1}, tol=(1e-5, 1e-5))

# ------------------------------------------------------------- data movement
for dt in [np.float32, np.int64, np.bool_, np.float16]:
    xd = rnd((2, 3, 4), dt, -9, 9) if dt != np.float16 else rnd((2, 3, 4)).astype(np.float16)
    case("Reshape", [I(xd), C(i64([4, 0, -1]))], [xd.reshape(4, 3, 2)])
    case("Flatten", [I(xd)], [xd.reshape(2, 12)], {"axis": 1})
    case("Squeeze", [I(xd[None])], [xd])
    case("Unsqueeze", [I(xd), C(i64([0, -1]))], [xd[None, ..., None]])
    for perm in ([2, 0, 1], [0, 2, 1], [1, 0, 2], None):
        case("Transpose", [I(xd)], [np.transpose(xd, perm)], {"perm": perm} if perm else None)
    case("Expand", [I(xd[:, :1, :]), C(i64([3, 2, 3, 1]))], [np.broadcast_to(xd[:, :1, :], (3, 2, 3, 4))])
    ys = np.split(xd, [1, 3], axis=1)
    case("Split", [I(xd), C(i64([1, 2, 1]))], ys, {"axis": 1})
    case("Split", [I(xd)], np.split(xd, 2, axis=-1), {"axis": -1, "num_outputs": 2})
    parts = [xd, xd[:, :1], xd[:, 1:]]
    case("Concat", [I(p) for p in parts], [np.concatenate(parts, axis=1)], {"axis": 1})
    case("Concat", [I(xd), I(xd)], [np.concatenate([xd, xd], axis=-1)], {"axis": -1})
    case("Shape", [I(xd)], [i64(xd.shape)])
    case("Shape", [I(xd)], [i64(xd.shape[1:])], {"start": -2})
    case("Shape", [I(xd)], [i64(xd.shape[:2])], {"start": -10, "end": 2})
    case("Trilu", [I(xd)], [np.triu(xd)])
    case("Trilu", [I(xd), C(i64(1))], [np.tril(xd, 1)], {"upper": 0})
    case("Trilu", [I(xd), C(i64(-1))], [np.triu(xd, -1)], {"upper": 1})
    idx = i64([[2, -1], [0, 1]])
    for axis in (0, 1, 2, -1):
        n = xd.shape[axis]
        ii = np.clip(idx, -n, n - 1)
        case("Gather", [I(xd), C(ii)], [np.take(xd, ii, axis=axis)], {"axis": axis})
    case("Gather", [I(xd), C(i64(1))], [np.take(xd, 1, axis=1)], {"axis": 1})
    case("Gather", [I(xd), C(i64([3]))], [xd[:1]], {"axis": 0}, error="out of range")
    case("Gather", [I(xd), C(i64([-4]))], [xd[:, :1]], {"axis": 1}, error="out of range")
# GatherND, Tile, IsNaN: onnxruntime is the oracle
for dt in [np.float32, np.int64, np.bool_, np.float16]:
    xd = rnd((2, 3, 4), dt, -9, 9) if dt != np.float16 else rnd((2, 3, 4)).astype(np.float16)
    for b, idx in [(0, i64([[1, 2], [0, -1], [1, 0]])), (0, i64([[[1], [0]], [[-1], [1]]])),
                   (0, i64([[1, 2, 3], [0, -3, -4]])), (1, i64([[2], [-1]])),
                   (1, i64([[[0, 1], [2, 3]], [[1, 1], [-1, -1]]])), (2, i64([[[3], [1], [0]],
                                                                             [[2], [2], [-4]]]))]:
        want = ort_run("GatherND", [xd, idx], {"batch_dims": b})[0]
        case("GatherND", [I(xd), C(idx)], [want], {"batch_dims": b})
    for reps in ([1, 1, 1], [2, 1, 3], [1, 0, 2], [3, 2, 1]):
        case("Tile", [I(xd), C(i64(reps))], [ort_run("Tile", [xd, i64(reps)])[0]])
    for axis, ix3 in [(0, i64([[[1], [0], [1]], [[0], [-2], [1]]])),
                      (1, i64([[[2, 0, 1, -1], [0, 0, 2, 1]]])),
                      (2, i64([[[3, 0, -4, 1]], [[2, 2, 2, 2]]])), (-1, i64([[[0], [3], [1]]]))]:
        want = ort_run("GatherElements", [xd, ix3], {"axis": axis})[0]
        case("GatherElements", [I(xd), C(ix3)], [want], {"axis": axis})
    if dt != np.bool_:
        idx = i64([[1, 2], [0, -1]])
        upd = rnd((2, 4), dt, -9, 9) if dt != np.float16 else rnd((2, 4)).astype(np.float16)
        reds = ["none"] if dt == np.float16 else ["none", "add", "mul", "max", "min"]
        for red in reds:
            want = ort_run("ScatterND", [xd, idx, upd], {"reduction": red}, opset=18)[0]
            case("ScatterND", [I(xd), C(idx), I(upd)], [want], {"reduction": red})
        idx = i64([[1], [0], [1]])  # a repeated index: "add" accumulates
        upd = np.ascontiguousarray(np.broadcast_to(xd[:1], (3, 3, 4)))
        if dt == np.float16:
            case("ScatterND", [I(xd), C(idx), I(upd)], [xd], {"reduction": "add"},
                 error="does not support dtype")
        else:
            want = ort_run("ScatterND", [xd, idx, upd], {"reduction": "add"}, opset=18)[0]
            case("ScatterND", [I(xd), C(idx), I(upd)], [want], {"reduction": "add"})
xs0 = rnd((2, 3))
case("GatherElements", [I(xs0), C(i64([[0, 3]]))], [xs0[:1, :2]], {"axis": 1}, error="out of range")
case("ScatterND", [I(xs0), C(i64([[2]])), I(xs0[:1])], [xs0], error="out of range")
case("ScatterND", [I(xs0), C(i64([[1]])), I(xs0[:1])], [xs0], {"reduction": "xor"},
     error="unknown reduction")
case("GatherND", [I(xs0), C(i64([[2, 0]]))], [xs0[:1, :1]], error="out of range")
case("GatherND", [I(xs0), C(i64([[0, -4]]))], [xs0[:1, 0]], error="out of range")
case("GatherND", [I(xs0), C(i32 := np.array([[1, 2], [0, 0]], np.int32))], [xs0[[1, 0], [2, 0]]])
case("Tile", [I(xs0), C(i64([2]))], [xs0], error="one entry per input axis")
for dt in (np.float32, np.float64):
    xn = rnd((3, 5), dt)
    xn[0, 1], xn[2, 2], xn[1, 0], xn[1, 4] = np.nan, -np.nan, np.inf, -np.inf
    case("IsNaN", [I(xn)], [ort_run("IsNaN", [xn])[0]])
xn = np.array([np.nan, 1.0, -np.inf, 0.0, -np.nan, 65504.0], np.float16)
case("IsNaN", [I(xn)], [np.isnan(xn)])
case("IsNaN", [I(xn.astype(np.float32))], [np.isnan(xn)], ev=True)
# Slice: python slicing is the oracle (it clamps the way ONNX does)
SL = [([1], [3], [1], None), ([0, 1], [-1, 100], [0, 2], None), ([-1], [-1000], [2], [-1]),
      ([5], [0], [1], [-2]), ([0, 2 ** 63 - 1], [2 ** 63 - 1, -2 ** 63], [0, 1], [2, -1]),
      ([1, 0, 3], [2, 3, 0], [0, 1, 2], [1, 2, -1]), ([2], [1], [0], None),
      # extreme steps take one element (UBSan: e - s + k - 1 and -k overflowed)
      ([1, 3], [3, -2 ** 63], [1, 2], [2 ** 63 - 1, -2 ** 63]), ([0], [5], [2], [2 ** 63 - 1])]
xs = rnd((3, 4, 5))
for st, en, ax, sp in SL:
    sl = [slice(None)] * 3
    for k, a in enumerate(ax):
        s = st[k]
        e = en[k]
        sl[a] = slice(max(min(s, 10 ** 6), -10 ** 6), max(min(e, 10 ** 6), -10 ** 6),
                      sp[k] if sp else 1)
    want = xs[tuple(sl)]
    ins = [I(xs), C(i64(st)), C(i64(en)), C(i64(ax))] + ([C(i64(sp))] if sp else [])
    case("Slice", ins, [want])
case("Slice", [I(xs), C(i64([0])), C(i64([2]))], [xs[0:2]], ev=True)
for dt in [np.float32, np.int64, np.bool_, np.int32, np.float64]:
    v = 3 if dt != np.bool_ else 1
    case("ConstantOfShape", [C(i64([2, 3]))], [np.full((2, 3), v, dt)], {"value": float(v)})
case("ConstantOfShape", [C(i64([4]))], [np.zeros(4, np.float32)])
for dt, (s, l, d) in [(np.float32, (0.5, 3.0, 0.25)), (np.int64, (10, -3, -3)),
                      (np.int32, (0, 7, 2)), (np.float64, (1.0, 1.0, 1.0)), (np.int16, (-2, 9, 4))]:
    r = np.arange(s, l, d, dtype=dt)
    case("Range", [C(np.array(s, dt)), C(np.array(l, dt)), C(np.array(d, dt))], [r])
V, Dm = 11, 6
table = rnd((V, Dm))
for idt in (np.int64, np.int32):
    ids = rnd((2, 5), idt, 0, V - 1)
    case("Embedding", [C(table), I(ids)], [table[ids]])
case("Embedding", [C(table), I(i64([[0, 11]]))], [table[[[0, 0]]]], error="out of range")
case("Embedding", [C(table), I(i64([-1]))], [table[[-1]]])
# inconsistent dtypes are reported, not read past the end of a buffer
f = rnd((2, 3))
case("Add", [I(f), I(f)], [np.zeros((2, 3), np.int64)], error="expected f32")
case("Concat", [I(f), I(rnd((2, 3), np.int64))], [np.zeros((2, 6), np.float32)], {"axis": 1},
     error="is i64 but output")
case("Where", [I(rnd((2, 3), np.bool_)), I(f), I(f)], [np.zeros((2, 3), np.float64)],
     error="is f32 but output")
case("Gather", [I(f), I(np.array([0.0], np.float32))], [f[:1]], error="int32 or int64")
# a wrong output shape is reported, not written past
case("Reshape", [I(xs), C(i64([7]))], [np.zeros(7, np.float32)], error="does not hold")
case("Transpose", [I(xs)], [np.transpose(xs, (1, 0, 2))], {"perm": [1, 0, 2]}, ev=True)
case("Transpose", [I(xs)], [np.zeros((4, 5, 3), np.float32)], {"perm": [1, 0, 2]}, error="permuted")

# ------------------------------------------------------------- other areas' ops
# the training ops' cases live beside their passes (tests/train/kernel_cases.py)
_extra = os.path.join(SRC, "tests/train/kernel_cases.py")
if os.path.exists(_extra):
    exec(compile(open(_extra).read(), _extra, "exec"))

# ------------------------------------------------------------- completeness
ops = re.findall(r'^OP\(\w+, "(\w+)"', open(os.path.join(SRC, "ir/ops.def")).read(), re.M)
missing = [o for o in ops if o not in covered]
if missing:
    print("ops without a kernel test case:", ", ".join(missing))
    sys.exit(1)

env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
r = subprocess.run([KC] + cases, capture_output=True, text=True, env=env)
sys.stdout.write(r.stdout[-20000:])
sys.stderr.write(r.stderr[-5000:])
print("%d cases over %d ops" % (len(cases), len(covered)))
sys.exit(r.returncode)
