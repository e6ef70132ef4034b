"""hetc import's diagnostics on small onnx.helper models:
- every unsupported op in ONE error (node name, op, domain, opset, count),
  exit 1;
- a graph that runs but cannot train: a warning naming each node on a
  parameter's gradient path that has no gradient rule, exit 0; none for
  graphs that train, or whose non-differentiable nodes are off that path.
The oracle for "unsupported" is onnx.defs (the op must be a real ONNX op the
importer does not claim) and the models pass onnx.checker.
usage: test_import_diag.py HETC SOURCE_DIR"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.defs
from onnx import TensorProto as T, helper, numpy_helper

HETC, SRC = sys.argv[1], sys.argv[2]
failures = []
WORK = tempfile.mkdtemp(prefix="hetc_import_diag_")
atexit.register(shutil.rmtree, WORK, True)  # removed however the test ends


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def save(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=(), check_model=True):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, v) for d, v in extra_opsets])
    if check_model:
        onnx.checker.check_model(m)
    path = os.path.join(WORK, "m%d.onnx" % len(os.listdir(WORK)))
    onnx.save(m, path)
    return path


def hetc_import(path):
    p = subprocess.run([HETC, "import", path, "-o", WORK], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stderr


F = T.FLOAT
W = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "W")

# ---------------------------------------------------------------- unsupported ops
for op in ("Conv", "Celu", "HardSwish"):
    assert onnx.defs.has(op), op  # real ONNX ops
nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("Celu", ["h"], ["c1"], name="celu_a"),
         helper.make_node("Celu", ["c1"], ["c2"], name="celu_b"),
         helper.make_node("HardSwish", ["c2"], ["s"], name="hswish"),
         helper.make_node("Celu", ["s"], ["c3"], name="celu_c"),
         helper.make_node("Relu", ["c3"], ["z"], name="ms_relu", domain="com.microsoft")]
path = save(nodes, [vi("x", F, [2, 3])], [vi("z", F, [2, 4])], [W],
            extra_opsets=[("com.microsoft", 1)], check_model=False)
rc, err = hetc_import(path)
lines = [ln for ln in err.splitlines() if ln.strip()]
check(rc == 1, "unsupported ops: exit 1 (got %d)" % rc)
check(lines and "3 ops (5 nodes) are not supported" in lines[0] and "'celu_a'" in lines[0],
      "unsupported ops: the first line counts them and names the first: %r" % lines[:1])
want = {"Celu": ("'celu_a'", "domain ''", "opset 17", "and 2 more nodes"),
        "HardSwish": ("'hswish'", "domain ''", "opset 17"),
        "Relu, domain 'com.microsoft'": ("'ms_relu'", "opset 1", "only the default ONNX domain is supported")}
for op, needles in want.items():
    hit = [ln for ln in lines if "(%s" % op in ln]
    check(len(hit) == 1 and all(n in hit[0] for n in needles),
          "unsupported ops: one line for %s naming %s: %s" % (op, needles, hit))
check("celu_b" not in err and "celu_c" not in err, "unsupported ops: one line per op, not per node")

# one op at an opset that predates it: the single-line form says where it exists
path = save([helper.make_node("Gelu", ["x"], ["z"], name="g0")], [vi("x", F, [2])],
            [vi("z", F, [2])], opset=17, check_model=False)
rc, err = hetc_import(path)
check(rc == 1 and "'g0'" in err and "Gelu" in err and "opset 17" in err and "20" in err
      and len(err.strip().splitlines()) == 1, "one unsupported op: one line: %r" % err)

# ---------------------------------------------------------------- cannot train
def warning_lines(err):
    lines = err.splitlines()
    for i, ln in enumerate(lines):
        if "warning" in ln:
            return lines[i:]
    return []


# Abs and CumSum have no gradient rule; a Pow whose exponent is not a
# constant is not differentiable either (the rule's own check)
cs_axis = numpy_helper.from_array(np.array(1, np.int64), "ax")
nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("Abs", ["h"], ["a"], name="abs_node"),
         helper.make_node("CumSum", ["a", "ax"], ["c"], name="cumsum_node"),
         helper.make_node("Pow", ["c", "e"], ["z"], name="pow_node")]
path = save(nodes, [vi("x", F, [2, 3]), vi("e", F, [])], [vi("z", F, [2, 4])], [W, cs_axis])
rc, err = hetc_import(path)
wl = warning_lines(err)
check(rc == 0, "untrainable graph: import still succeeds (exit 0, got %d: %s)" % (rc, err))
check(wl and "cannot train" in wl[0] and "3 nodes" in wl[0], "untrainable: warning line: %r" % wl)
for name, op, why in (("abs_node", "Abs", "no gradient rule"),
                      ("cumsum_node", "CumSum", "no gradient rule"),
                      ("pow_node", "Pow", "constant scalar exponent")):
    hit = [ln for ln in wl if "'%s'" % name in ln]
    check(len(hit) == 1 and "(%s)" % op in hit[0] and why in hit[0],
          "untrainable: %s named with op and reason: %s" % (name, hit))

# trainable graphs: no warning, including a NaN guard (IsNaN has no
# gradient, but only feeds Where's condition) and a comparison mask
nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("IsNaN", ["h"], ["nan"], name="isnan"),
         helper.make_node("Where", ["nan", "zero", "h"], ["g"], name="guard"),
         helper.make_node("Greater", ["g", "zero"], ["pos"], name="gt"),
         helper.make_node("Where", ["pos", "g", "zero"], ["r"], name="relu_by_where"),
         helper.make_node("Tile", ["r", "reps"], ["t"], name="tile"),
         helper.make_node("Relu", ["t"], ["z"], name="act")]
inits = [W, numpy_helper.from_array(np.array(0, np.float32), "zero"),
         numpy_helper.from_array(np.array([1, 2], np.int64), "reps")]
path = save(nodes, [vi("x", F, [2, 3])], [vi("z", F, [2, 8])], inits)
rc, err = hetc_import(path)
check(rc == 0 and not warning_lines(err), "trainable graph: no warning: %r" % err)

# no parameters at all: nothing to train, nothing to warn about
path = save([helper.make_node("Abs", ["x"], ["z"])], [vi("x", F, [2])], [vi("z", F, [2])])
rc, err = hetc_import(path)
check(rc == 0 and not warning_lines(err), "no parameters: no warning: %r" % err)

print("%d failure(s)" % len(failures) if failures else "all passed")
sys.exit(1 if failures else 0)
