"""Shared helpers for the frontend tests: run import_check, parse its output."""
import os
import subprocess
import sys

import onnx
from onnx import helper

CHECK = None  # path to import_check, set by init()
WORK = None   # scratch directory under the build tree
FAILS = []


def init():
    global CHECK, WORK
    if len(sys.argv) != 3:
        sys.exit("usage: %s IMPORT_CHECK WORKDIR" % sys.argv[0])
    CHECK, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)


def run(args, env=None):
    """Run import_check; returns (rc, stdout).  Any sanitizer report fails."""
    e = dict(os.environ)
    # make sanitizer findings distinguishable from a clean "exit 1" rejection
    e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":exitcode=86"
    e["UBSAN_OPTIONS"] = e.get("UBSAN_OPTIONS", "") + ":halt_on_error=1:exitcode=87"
    if env:
        e.update(env)
    p = subprocess.run([CHECK] + list(args), capture_output=True, text=True, errors="replace",
                       env=e, timeout=120)
    if "Sanitizer" in p.stderr or "runtime error" in p.stderr or p.returncode not in (0, 1):
        fail("import_check %s: crashed or sanitizer report (rc=%d)\n%s\n%s"
             % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p.returncode, p.stdout


def fail(msg):
    FAILS.append(msg)
    print("FAIL:", msg, flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def finish():
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        sys.exit(1)
    print("all passed")


def save(model, name, check_model=True):
    """Save a model under WORK; validate it with onnx.checker first so the
    test models themselves are legal ONNX (the independent oracle)."""
    if check_model:
        onnx.checker.check_model(model)
    path = os.path.join(WORK, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)
    return path


def model(nodes, inputs, outputs, inits=(), opset=17, ir_version=None, value_info=()):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits),
                          value_info=list(value_info))
    kw = {}
    if ir_version is not None:
        kw["ir_version"] = ir_version
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    # the checker wants declared output shapes: let onnx's own shape
    # inference supply the ones the test left open (outputs only)
    if any(not o.type.tensor_type.HasField("shape") for o in m.graph.output):
        inferred = onnx.shape_inference.infer_shapes(m)
        for o, io in zip(m.graph.output, inferred.graph.output):
            if not o.type.tensor_type.HasField("shape"):
                o.CopyFrom(io)
        # old opsets without inference functions: a symbolic shape of the
        # first input's rank (the importer leaves unbound output dims open)
        rank = len(inputs[0].type.tensor_type.shape.dim) if inputs else 1
        for o in m.graph.output:
            if not o.type.tensor_type.HasField("shape"):
                o.type.tensor_type.shape.dim.extend(
                    [onnx.TensorShapeProto.Dimension(dim_param="%s_d%d" % (o.name, i))
                     for i in range(rank)])
    return m


class Dump:
    """Parsed `import_check --dump` output."""

    def __init__(self, text):
        self.ok = text.startswith("ok ")
        self.values, self.nodes, self.inputs, self.outputs = {}, [], {}, {}
        self.summary = {}
        self.ops = {}
        for line in text.splitlines():
            f = line.split(" ")
            if line.startswith("ok "):
                self.summary = dict(kv.split("=") for kv in f[1:])
            elif line.startswith("ops:"):
                self.ops = {k: int(v) for k, v in (kv.split("=") for kv in f[1:] if kv)}
            elif f[0] == "input":
                self.inputs[f[1]] = (f[2], f[3])
            elif f[0] == "output":
                self.outputs[f[1]] = (f[2], f[3])
            elif f[0] == "value":
                v = {"kind": f[2], "dtype": f[3], "shape": f[4]}
                for extra in f[5:]:
                    k, _, val = extra.partition("=")
                    v[k] = val
                self.values[f[1]] = v
            elif f[0] == "node":
                n = {"op": f[1], "name": f[2]}
                for extra in f[3:]:
                    k, _, val = extra.partition("=")
                    n[k] = val
                n["in"] = n["in"].split(",") if n["in"] else []
                n["out"] = n["out"].split(",") if n["out"] else []
                attrs = {}
                for a in n["attrs"].split(";") if n["attrs"] else []:
                    k, _, val = a.partition(":")
                    attrs[k] = val
                n["attrs"] = attrs
                self.nodes.append(n)

    def node(self, op):
        ns = [n for n in self.nodes if n["op"] == op]
        return ns[0] if ns else None

    def const_data(self, name):
        v = self.values.get(name)
        return v.get("data") if v else None
