"""Every supported ONNX op imports at every opset where its schema changes.

Oracles: onnx.defs (which opsets define each op: the importer must claim an
op at exactly those opsets) and the ONNX models themselves (attributes that
older opsets carry must reappear as constant inputs with the same values).
Each test model passes onnx.checker first.
"""
import numpy as np
import onnx
import onnx.defs
from onnx import TensorProto as T, helper, numpy_helper

import fe_common as fc

MAXV = 28  # newest default-domain opset of onnx 1.23.2 (vendored onnx.proto)

OPS = ("Add Sub Mul Div Pow Max Min Mod Equal Less LessOrEqual Greater GreaterOrEqual And Or "
       "Xor Where Neg Abs Sqrt Reciprocal Exp Log Sin Cos Tanh Sigmoid Erf Relu Floor Ceil Not "
       "Cast Clip Identity Dropout MatMul Gemm ReduceMean ReduceSum ReduceMax Softmax LogSoftmax "
       "Reshape Transpose Split Concat Slice Squeeze Unsqueeze Expand Flatten Shape "
       "ConstantOfShape Range Trilu Gather CumSum LayerNormalization Gelu Constant IsNaN GatherND "
       "Tile GatherElements ScatterND").split()

# IR op each ONNX op lowers to (ir/ops.def names)
IR_NAME = {"LayerNormalization": "LayerNorm", "Constant": None}


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def defined_at(op, v):
    try:
        onnx.defs.get_schema(op, v, "")
        return True
    except Exception:
        return False


def since_versions(op):
    return sorted({onnx.defs.get_schema(op, v, "").since_version
                   for v in range(1, MAXV + 1) if defined_at(op, v)})


F = T.FLOAT


def build(op, v):
    """(nodes, inputs, outputs, inits, moved) for op at opset v.  moved maps
    IR input slot -> expected constant data (from attributes in the model)."""
    x23 = vi("x", F, [2, 3])
    moved = {}
    inits = []
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        attrs = {"broadcast": 1} if v < 7 else {}
        n = helper.make_node(op, ["x", "y"], ["z"], **attrs)
        return [n], [x23, vi("y", F, [3])], [vi("z", F, None)], [], moved
    if op in ("Equal", "Less", "Greater", "And", "Or", "Xor"):
        dt = T.BOOL if op in ("And", "Or", "Xor") else (T.INT64 if op == "Equal" else F)
        n = helper.make_node(op, ["x", "y"], ["z"])
        return [n], [vi("x", dt, [2, 3]), vi("y", dt, [2, 3])], [vi("z", T.BOOL, None)], [], moved
    if op in ("LessOrEqual", "GreaterOrEqual"):
        n = helper.make_node(op, ["x", "y"], ["z"])
        return [n], [x23, vi("y", F, [2, 3])], [vi("z", T.BOOL, None)], [], moved
    if op in ("Max", "Min"):
        n = helper.make_node(op, ["x", "y"], ["z"])
        return [n], [x23, vi("y", F, [2, 3])], [vi("z", F, None)], [], moved
    if op == "Mod":
        n = helper.make_node(op, ["x", "y"], ["z"], fmod=0)
        return [n], [vi("x", T.INT64, [4]), vi("y", T.INT64, [4])], [vi("z", T.INT64, None)], [], moved
    if op == "Where":
        n = helper.make_node(op, ["c", "x", "y"], ["z"])
        return [n], [vi("c", T.BOOL, [2, 3]), x23, vi("y", F, [2, 3])], [vi("z", F, None)], [], moved
    if op == "Not":
        return ([helper.make_node(op, ["x"], ["z"])], [vi("x", T.BOOL, [3])],
                [vi("z", T.BOOL, None)], [], moved)
    if op in ("Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tanh", "Sigmoid",
              "Erf", "Relu", "Floor", "Ceil", "Identity", "MatMul", "Gelu"):
        attrs = {"approximate": "tanh"} if op == "Gelu" else {}
        ins = ["x", "w"] if op == "MatMul" else ["x"]
        inps = [x23] + ([vi("w", F, [3, 4])] if op == "MatMul" else [])
        return [helper.make_node(op, ins, ["z"], **attrs)], inps, [vi("z", F, None)], [], moved
    if op == "Cast":
        to = "INT64" if v < 6 else T.INT64
        return ([helper.make_node(op, ["x"], ["z"], to=to)], [x23], [vi("z", T.INT64, None)], [],
                moved)
    if op == "Clip":
        if v < 11:
            moved = {1: "-1", 2: "1.5"}
            return ([helper.make_node(op, ["x"], ["z"], min=-1.0, max=1.5)], [x23],
                    [vi("z", F, None)], [], moved)
        inits = [init("lo", np.float32(-1)), init("hi", np.float32(1.5))]
        return ([helper.make_node(op, ["x", "lo", "hi"], ["z"])], [x23], [vi("z", F, None)],
                inits, moved)
    if op == "Dropout":
        if v < 12:
            attrs = {"ratio": 0.25}
            if v < 7:
                attrs["is_test"] = 1
            moved = {1: "0.25"}
            return ([helper.make_node(op, ["x"], ["z", "m"], **attrs)], [x23],
                    [vi("z", F, None)], [], moved)
        return [helper.make_node(op, ["x"], ["z"])], [x23], [vi("z", F, None)], [], moved
    if op == "Gemm":
        attrs = {"alpha": 0.5}
        if v < 7:
            attrs["broadcast"] = 1
        inits = [init("b", np.ones((3, 4), np.float32)), init("c", np.zeros(4, np.float32))]
        return ([helper.make_node(op, ["x", "b", "c"], ["z"], **attrs)], [x23],
                [vi("z", F, None)], inits, moved)
    if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        moved_at = 13 if op == "ReduceSum" else 18
        if v < moved_at:
            moved = {1: "1"}
            n = helper.make_node(op, ["x"], ["z"], axes=[1], keepdims=0)
        else:
            inits = [init("ax", np.array([1], np.int64))]
            n = helper.make_node(op, ["x", "ax"], ["z"], keepdims=0)
        return [n], [x23], [vi("z", F, None)], inits, moved
    if op in ("Softmax", "LogSoftmax"):
        n = helper.make_node(op, ["x"], ["z"], axis=1)
        return [n], [vi("x", F, [2, 3, 4])], [vi("z", F, None)], [], moved
    if op == "Reshape":
        if v < 5:
            moved = {1: "3,2"}
            n = helper.make_node(op, ["x"], ["z"], shape=[3, 2])
        else:
            inits = [init("s", np.array([3, 2], np.int64))]
            n = helper.make_node(op, ["x", "s"], ["z"])
        return [n], [x23], [vi("z", F, None)], inits, moved
    if op == "Transpose":
        return ([helper.make_node(op, ["x"], ["z"], perm=[1, 0])], [x23], [vi("z", F, None)], [],
                moved)
    if op == "Split":
        outs = [vi("a", F, None), vi("b", F, None)]
        if v < 13:
            moved = {1: "1,2"}
            n = helper.make_node(op, ["x"], ["a", "b"], axis=1, split=[1, 2])
        elif v < 18:
            inits = [init("sp", np.array([1, 2], np.int64))]
            n = helper.make_node(op, ["x", "sp"], ["a", "b"], axis=1)
        else:
            n = helper.make_node(op, ["x"], ["a", "b"], axis=1, num_outputs=2)
        return [n], [x23], outs, inits, moved
    if op == "Concat":
        attrs = {} if v < 4 else {"axis": 0}
        n = helper.make_node(op, ["x", "y"], ["z"], **attrs)
        return [n], [x23, vi("y", F, [2, 3])], [vi("z", F, None)], [], moved
    if op == "Slice":
        if v < 10:
            moved = {1: "0", 2: "1", 3: "1"}
            n = helper.make_node(op, ["x"], ["z"], starts=[0], ends=[1], axes=[1])
        else:
            inits = [init("st", np.array([0], np.int64)), init("en", np.array([1], np.int64)),
                     init("ax", np.array([1], np.int64))]
            n = helper.make_node(op, ["x", "st", "en", "ax"], ["z"])
        return [n], [x23], [vi("z", F, None)], inits, moved
    if op in ("Squeeze", "Unsqueeze"):
        xin = vi("x", F, [1, 3] if op == "Squeeze" else [3])
        if v < 13:
            moved = {1: "0"}
            n = helper.make_node(op, ["x"], ["z"], axes=[0])
        else:
            inits = [init("ax", np.array([0], np.int64))]
            n = helper.make_node(op, ["x", "ax"], ["z"])
        return [n], [xin], [vi("z", F, None)], inits, moved
    if op == "Expand":
        inits = [init("s", np.array([2, 3, 4], np.int64))]
        return ([helper.make_node(op, ["x", "s"], ["z"])], [vi("x", F, [3, 1])],
                [vi("z", F, None)], inits, moved)
    if op == "Flatten":
        return ([helper.make_node(op, ["x"], ["z"], axis=1)], [vi("x", F, [2, 3, 4])],
                [vi("z", F, None)], [], moved)
    if op == "Shape":
        attrs = {"start": 1} if v >= 15 else {}
        return ([helper.make_node(op, ["x"], ["z"], **attrs)], [x23],
                [vi("z", T.INT64, None)], [], moved)
    if op == "ConstantOfShape":
        inits = [init("s", np.array([2, 3], np.int64))]
        val = numpy_helper.from_array(np.array([2.5], np.float32))
        return ([helper.make_node(op, ["s"], ["z"], value=val)], [], [vi("z", F, None)], inits,
                moved)
    if op == "Range":
        inits = [init("a", np.float32(0)), init("b", np.float32(5)), init("d", np.float32(1))]
        return ([helper.make_node(op, ["a", "b", "d"], ["z"])], [], [vi("z", F, None)], inits,
                moved)
    if op == "Trilu":
        return ([helper.make_node(op, ["x"], ["z"], upper=0)], [vi("x", F, [3, 3])],
                [vi("z", F, None)], [], moved)
    if op == "Gather":
        inits = [init("tab", np.arange(20, dtype=np.float32).reshape(5, 4))]
        return ([helper.make_node(op, ["tab", "i"], ["z"], axis=0)], [vi("i", T.INT64, [2])],
                [vi("z", F, None)], inits, moved)
    if op == "CumSum":
        inits = [init("ax", np.int64(0))]
        return ([helper.make_node(op, ["x", "ax"], ["z"])], [vi("x", F, [4])],
                [vi("z", F, None)], inits, moved)
    if op == "IsNaN":
        return ([helper.make_node(op, ["x"], ["z"])], [x23], [vi("z", T.BOOL, None)], [], moved)
    if op == "GatherND":
        # batch_dims exists from opset 12: one index tuple per batch row
        attrs = {"batch_dims": 1} if v >= 12 else {}
        idx = np.array([[1], [2]] if v >= 12 else [[0, 1], [1, 2]], np.int64)
        return ([helper.make_node(op, ["x", "i"], ["z"], **attrs)], [vi("x", F, [2, 3, 4])],
                [vi("z", F, None)], [init("i", idx)], moved)
    if op == "Tile":
        if v < 6:  # Tile-1: (input, tiles, axis) scalars become the repeats vector
            moved = {1: "1,2"}
            inits = [init("t", np.float32(2)), init("a", np.float32(1))]
            return ([helper.make_node(op, ["x", "t", "a"], ["z"])], [x23], [vi("z", F, None)],
                    inits, moved)
        inits = [init("r", np.array([1, 2], np.int64))]
        return ([helper.make_node(op, ["x", "r"], ["z"])], [x23], [vi("z", F, None)], inits,
                moved)
    if op == "GatherElements":
        inits = [init("i", np.array([[2, 0], [1, -1]], np.int64))]
        return ([helper.make_node(op, ["x", "i"], ["z"], axis=1)], [x23], [vi("z", F, None)],
                inits, moved)
    if op == "ScatterND":
        # reduction exists from opset 16 (add/mul) and 18 (max/min)
        attrs = {"reduction": "add"} if v >= 16 else {}
        inits = [init("i", np.array([[1]], np.int64)), init("u", np.ones((1, 3), np.float32))]
        return ([helper.make_node(op, ["x", "i", "u"], ["z"], **attrs)], [x23],
                [vi("z", F, None)], inits, moved)
    if op == "LayerNormalization":
        inits = [init("sc", np.ones(4, np.float32)), init("bi", np.zeros(4, np.float32))]
        return ([helper.make_node(op, ["x", "sc", "bi"], ["z"], axis=-1, epsilon=1e-5)],
                [vi("x", F, [2, 4])], [vi("z", F, None)], inits, moved)
    if op == "Constant":
        val = numpy_helper.from_array(np.array([1.5, 2.5], np.float32))
        nodes = [helper.make_node(op, [], ["c"], value=val),
                 helper.make_node("Add", ["x", "c"], ["z"], **({"broadcast": 1} if v < 7 else {}))]
        return nodes, [vi("x", F, [2])], [vi("z", F, None)], [], moved
    raise KeyError(op)


def check_model(op, v):
    nodes, ins, outs, inits, moved = build(op, v)
    m = fc.model(nodes, ins, outs, inits, opset=v)
    path = fc.save(m, "%s_%d.onnx" % (op, v))
    rc, out = fc.run([path, "--dump"])
    if not fc.check(rc == 0, "%s opset %d: import failed: %s" % (op, v, out)):
        return
    d = fc.Dump(out)
    ir = IR_NAME.get(op, op)
    if op == "Constant":
        fc.check(d.values.get("c", {}).get("kind") == "const" and
                 d.const_data("c") == "1.5,2.5", "Constant opset %d: bad const %s" % (v, d.values.get("c")))
        return
    node = d.node(ir)
    if not fc.check(node is not None, "%s opset %d: no IR %s node in %s" % (op, v, ir, d.ops)):
        return
    for slot, want in moved.items():
        got = d.const_data(node["in"][slot]) if len(node["in"]) > slot else None
        fc.check(got == want, "%s opset %d: input %d should be const %s, is %s"
                 % (op, v, slot, want, got))
        moved_attr = [a for a in ("axes", "split", "shape", "starts", "ends", "min", "max", "ratio")
                      if a in node["attrs"]]
        fc.check(not moved_attr, "%s opset %d: attribute(s) %s not moved" % (op, v, moved_attr))
    # per-op semantics the lowering must produce
    if op == "Cast":
        fc.check(node["attrs"].get("to") == str(T.INT64), "Cast opset %d: to=%s" % (v, node["attrs"]))
    if op == "Concat":
        fc.check(node["attrs"].get("axis") == ("1" if v < 4 else "0"), "Concat %d: axis" % v)
    if op == "Split" and v >= 13 and v < 18:
        fc.check(len(node["in"]) == 2, "Split %d: split input kept" % v)
    if op == "Split" and v >= 18:
        fc.check(node["attrs"].get("num_outputs") == "2", "Split %d: num_outputs" % v)
    if op == "ConstantOfShape":
        fc.check(node["attrs"].get("value") == "2.5" and node["attrs"].get("dtype") == "1",
                 "ConstantOfShape %d: attrs %s" % (v, node["attrs"]))
    if op in ("Softmax", "LogSoftmax"):
        # axis 1 of a rank-3 input: opset < 13 means "flatten at 1", so the
        # importer must go through Flatten/Reshape; from 13 it is one op.
        fc.check(("Flatten" in d.ops) == (v < 13), "%s %d: flatten path %s" % (op, v, d.ops))
    if op == "Dropout" and v < 12:
        fc.check(d.values.get("m", {}).get("dtype") == "bool", "Dropout %d: mask dtype" % v)
    if op == "GatherND":
        fc.check(node["attrs"].get("batch_dims") == ("1" if v >= 12 else None),
                 "GatherND %d: attrs %s" % (v, node["attrs"]))
    if op == "ScatterND":
        fc.check(node["attrs"].get("reduction") == ("'add'" if v >= 16 else None),
                 "ScatterND %d: attrs %s" % (v, node["attrs"]))
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        fc.check("broadcast" not in node["attrs"], "%s %d: broadcast attr kept" % (op, v))


def test_coverage():
    """The importer claims op X at opset v iff ONNX defines X at v."""
    for v in range(1, MAXV + 2):
        rc, out = fc.run(["--ops", str(v)])
        got = set(out.split())
        want = {op for op in OPS if v <= MAXV and defined_at(op, v)}
        fc.check(got == want, "opset %d: importer claims %s, onnx defines %s (diff %s)"
                 % (v, sorted(got), sorted(want), sorted(got ^ want)))


def test_op_supported():
    """hetc_import_op_supported agrees with onnx.defs, and rejects other domains."""
    for op in ("Gelu", "Squeeze", "Trilu", "Conv", "LayerNormalization"):
        for v in (1, 13, 17, 20, MAXV, MAXV + 1):
            want = op in OPS and v <= MAXV and defined_at(op, v)
            for dom in ("", "ai.onnx"):
                rc, out = fc.run(["--op-supported", dom, op, str(v)])
                fc.check(out.strip() == str(int(want)), "op_supported(%r,%s,%d) = %s, want %d"
                         % (dom, op, v, out.strip(), want))
        rc, out = fc.run(["--op-supported", "com.microsoft", op, "17"])
        fc.check(out.strip() == "0", "op_supported(com.microsoft, %s) = %s" % (op, out.strip()))


def test_variants():
    for op in OPS:
        vs = since_versions(op)
        todo = set(vs) | {MAXV}
        for a, b in zip(vs, vs[1:]):
            todo.add(b - 1)  # last opset of each schema version
        for v in sorted(todo):
            check_model(op, v)


def test_softmax_last_axis():
    """Opset < 13 with axis == last dim is the plain op (no Flatten)."""
    n = helper.make_node("Softmax", ["x"], ["z"], axis=2)
    m = fc.model([n], [vi("x", F, [2, 3, 4])], [vi("z", F, None)], opset=11)
    rc, out = fc.run([fc.save(m, "softmax_last.onnx"), "--dump"])
    d = fc.Dump(out)
    fc.check(rc == 0 and d.ops == {"Softmax": 1}, "softmax axis=last: %s" % out)


def test_split_even_old():
    """Split-13 without sizes splits evenly into #outputs: num_outputs set."""
    n = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0)
    m = fc.model([n], [vi("x", F, [6])], [vi("a", F, None), vi("b", F, None), vi("c", F, None)],
                 opset=13)
    rc, out = fc.run([fc.save(m, "split_even.onnx"), "--dump"])
    node = fc.Dump(out).node("Split")
    fc.check(rc == 0 and node and node["attrs"].get("num_outputs") == "3", "split even: %s" % out)


def test_constant_forms():
    """Constant value_* attributes of opset 12+ become typed CONST values."""
    nodes = [helper.make_node("Constant", [], ["a"], value_ints=[3, 4]),
             helper.make_node("Constant", [], ["b"], value_float=0.5),
             helper.make_node("Constant", [], ["c"], value_int=7),
             helper.make_node("Constant", [], ["e"], value_floats=[1.0, -2.0]),
             helper.make_node("Reshape", ["x", "a"], ["y"]),
             helper.make_node("Mul", ["y", "b"], ["y2"]),
             helper.make_node("Unsqueeze", ["c"], ["c1"], axes=[0]),
             helper.make_node("Add", ["y2", "e"], ["z"])]
    m = fc.model(nodes, [vi("x", F, [12])], [vi("z", F, None), vi("c1", T.INT64, None)], opset=12)
    rc, out = fc.run([fc.save(m, "const_forms.onnx"), "--dump"])
    d = fc.Dump(out)
    want = {"a": ("i64", "[2]", "3,4"), "b": ("f32", "[]", "0.5"), "c": ("i64", "[]", "7"),
            "e": ("f32", "[2]", "1,-2")}
    for k, (dt, shp, data) in want.items():
        v = d.values.get(k, {})
        fc.check(v.get("kind") == "const" and v.get("dtype") == dt and v.get("shape") == shp
                 and v.get("data") == data, "Constant %s: %s" % (k, v))


def test_legacy_broadcast_axis():
    """Opset < 7 broadcast with axis: accepted when it equals numpy's
    trailing alignment, rejected with a clear message otherwise."""
    for axis, ok in ((1, True), (0, False)):
        n = helper.make_node("Add", ["x", "y"], ["z"], broadcast=1, axis=axis)
        shape_y = [3] if ok else [2]
        m = fc.model([n], [vi("x", F, [2, 3]), vi("y", F, shape_y)], [vi("z", F, None)], opset=6)
        rc, out = fc.run([fc.save(m, "legacy_axis%d.onnx" % axis)])
        if ok:
            fc.check(rc == 0, "legacy axis=%d should import: %s" % (axis, out))
        else:
            fc.check(rc == 1 and "legacy broadcast" in out, "legacy axis=0: %s" % out)


def test_layernorm_outputs():
    """LayerNormalization Mean/InvStdDev: no extra nodes when unused; computed
    with primitive ops beside the fused LayerNorm when read (their values are
    checked against the ONNX test data by the conformance suite)."""
    inits = [init("sc", np.ones(4, np.float32))]
    for used in (False, True):
        nodes = [helper.make_node("LayerNormalization", ["x", "sc"], ["y", "mean", "isd"], axis=-1)]
        outs = [vi("y", F, None)]
        if used:
            nodes.append(helper.make_node("Neg", ["mean"], ["nm"]))
            outs.append(vi("nm", F, None))
        m = fc.model(nodes, [vi("x", F, [2, 4])], outs, inits, opset=17)
        rc, out = fc.run([fc.save(m, "ln_used%d.onnx" % used)])
        if used:
            fc.check(rc == 0 and "LayerNorm=1" in out and "ReduceMean=" in out,
                     "LN used mean: %s" % out)
        else:
            fc.check(rc == 0 and "ReduceMean" not in out, "LN unused stats: %s" % out)


def test_clip_half():
    """Clip < 11 bounds become constants of the input's dtype (f16 here);
    numpy's float16 rounding is the oracle for the bits."""
    for lo, hi in ((-1.5, 2.0), (1e-7, 70000.0), (0.1, -3.3e-5)):
        n = helper.make_node("Clip", ["x"], ["z"], min=lo, max=hi)
        m = fc.model([n], [vi("x", T.FLOAT16, [3])], [vi("z", T.FLOAT16, [3])], opset=6)
        rc, out = fc.run([fc.save(m, "clip_f16.onnx"), "--dump"])
        d = fc.Dump(out)
        node = d.node("Clip")
        with np.errstate(over="ignore"):
            want = ["0x%04x" % np.array([b], np.float32).astype(np.float16).view(np.uint16)[0]
                    for b in (lo, hi)]
        got = [d.values.get(x, {}).get("data") for x in (node["in"][1:] if node else [])]
        dts = [d.values.get(x, {}).get("dtype") for x in (node["in"][1:] if node else [])]
        fc.check(rc == 0 and got == want and dts == ["f16", "f16"],
                 "Clip-6 f16 bounds %s: got %s %s want %s" % ((lo, hi), got, dts, want))


def test_param_const_rule():
    """float initializers of rank >= 1 are params; ints and scalars consts."""
    inits = [init("w", np.array([[0.5, -1], [3, 4.25]], np.float32)), init("s", np.float32(2)),
             init("shape", np.array([4], np.int64)), init("mask", np.ones((2, 2), bool))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Mul", ["a", "s"], ["b"]),
             helper.make_node("Where", ["mask", "b", "a"], ["c"]),
             helper.make_node("Reshape", ["c", "shape"], ["z"])]
    m = fc.model(nodes, [vi("x", F, [2, 2])], [vi("z", F, None)], inits)
    rc, out = fc.run([fc.save(m, "kinds.onnx"), "--dump"])
    d = fc.Dump(out)
    want = {"w": "param", "s": "const", "shape": "const", "mask": "const"}
    got = {k: d.values.get(k, {}).get("kind") for k in want}
    fc.check(rc == 0 and got == want, "value kinds: %s" % got)
    # inline raw_data reaches the IR unchanged (numpy_helper wrote it)
    fc.check(d.const_data("w") == "0.5,-1,3,4.25" and d.const_data("shape") == "4" and
             d.const_data("s") == "2", "initializer data: %s" % out)


fc.init()
test_coverage()
test_op_supported()
test_variants()
test_softmax_last_axis()
test_split_even_old()
test_constant_forms()
test_legacy_broadcast_axis()
test_layernorm_outputs()
test_param_const_rule()
test_clip_half()
fc.finish()
