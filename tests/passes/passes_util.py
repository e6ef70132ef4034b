"""Helpers for the passes tests: build ONNX graphs, run them through
passes_check (import + pipeline + host executor) and onnxruntime (the
oracle), and compare."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RTOL = 1e-4
CHECK = None  # path of passes_check, set by init()


def init(argv):
    global CHECK
    if len(argv) < 2:
        sys.exit("usage: %s PATH/TO/passes_check" % argv[0])
    CHECK = argv[1]


F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL


def vi(name, dtype=F32, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, arr):
    """A Constant node (imported as a CONST value whatever its dtype)."""
    arr = np.asarray(arr)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))


def init_t(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # Outputs declared without a dtype (0) get the one ONNX's own type
    # inference gives, and never a shape: the shapes are what hetc infers.
    untyped = [o for o in m.graph.output if o.type.tensor_type.elem_type == 0]
    if untyped:
        inferred = onnx.shape_inference.infer_shapes(m)
        types = {o.name: o.type.tensor_type.elem_type for o in inferred.graph.output}
        for v in inferred.graph.value_info:
            types.setdefault(v.name, v.type.tensor_type.elem_type)
        for o in untyped:
            o.type.tensor_type.elem_type = types.get(o.name, 0)
    # no onnx.checker: graph outputs here deliberately declare no shape
    return m


class Result:
    def __init__(self, info, outputs, stderr):
        self.info = info
        self.outputs = outputs
        self.stderr = stderr

    def after(self, op):
        return self.info["after"].get(op, 0)

    def nodes(self, op):
        return [n for n in self.info["nodes"] if n["op"] == op]

    def before(self, op):
        return self.info["before"].get(op, 0)


def run_check(m, inputs=None, passes=None, values=False, expect_fail=False, extra=()):
    """Save m, run passes_check; inputs: list of arrays (graph input order)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        if isinstance(m, str):
            path = m
        else:
            onnx.save(m, path)
        cmd = [CHECK, path, "--out-dir", d]
        if passes is not None:
            cmd += ["--passes", passes]
        if values:
            cmd.append("--values")
        cmd.append("--nodes")
        for i, a in enumerate(inputs or []):
            p = os.path.join(d, "in%d.npy" % i)
            np.save(p, a)
            cmd += ["--input", p]
        cmd += list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if expect_fail:
            assert r.returncode != 0, "passes_check unexpectedly succeeded:\n" + r.stdout
            return r.stderr
        if r.returncode != 0:
            raise AssertionError("passes_check failed (%d): %s\n%s" % (r.returncode, r.stderr,
                                                                       " ".join(cmd)))
        info = json.loads(r.stdout.splitlines()[0])
        outs = [np.load(f) for f in info.get("files", [])]
        return Result(info, outs, r.stderr)


def ort_run(m, inputs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    b = m if isinstance(m, (bytes, str)) else m.SerializeToString()
    s = ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(s.get_inputs(), inputs)}
    return s.run(None, feeds)


def assert_close(got, ref, what, rtol=RTOL):
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, "%s: shape %s, onnxruntime %s" % (what, got.shape, ref.shape)
    if ref.dtype.kind in "biu":
        assert np.array_equal(got, ref), "%s: integer outputs differ" % what
        return
    # relative to each element, with a floor scaled to the tensor's magnitude
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    tol = rtol * np.abs(ref) + rtol * 1e-2 * scale + 1e-7
    bad = ~(np.abs(got.astype(np.float64) - ref) <= tol)
    bad &= ~(np.isnan(got) & np.isnan(ref))
    bad &= ~(np.isinf(got) & np.isinf(ref) & (np.sign(got) == np.sign(ref)))
    assert not bad.any(), "%s: %d of %d elements differ beyond rtol %g (max |diff| %g)" % (
        what, int(bad.sum()), ref.size, rtol, float(np.nanmax(np.abs(got - ref))))


class Suite:
    """Tiny runner: each case is a function; prints 'N passed, N failed'."""

    def __init__(self):
        self.cases = []

    def case(self, fn):
        self.cases.append(fn)
        return fn

    def run(self):
        only = os.environ.get("PASSES_ONLY")
        passed = failed = 0
        for fn in self.cases:
            if only and only not in fn.__name__:
                continue
            try:
                fn()
                passed += 1
                print("ok   %s" % fn.__name__)
            except Exception as e:  # report every failure, keep going
                failed += 1
                print("FAIL %s: %s" % (fn.__name__, e))
        print("%d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
