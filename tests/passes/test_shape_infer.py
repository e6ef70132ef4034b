"""shape-infer: the dtype and static shape inferred for every output must
equal what onnxruntime actually produces, over many ops and attribute
combinations; shape computations (Shape -> Gather -> Unsqueeze -> Concat ->
Reshape) must fold; bad graphs must fail naming node, op and shapes."""
import sys

import numpy as np

import passes_util as pu
from passes_util import init_t, model, vi
from onnx import helper

S = pu.Suite()
rng = np.random.default_rng(7)
NP2ONNX = {np.float32: pu.F32, np.int64: pu.I64, np.bool_: pu.BOOL, np.int32: pu.TensorProto.INT32}
NP2IR = {"float32": "f32", "int64": "i64", "bool": "bool", "int32": "i32", "float64": "f64"}


def data(shape, dt):
    if dt == np.float32:
        return rng.standard_normal(shape).astype(np.float32)
    if dt == np.bool_:
        return rng.random(shape) > 0.5
    return rng.integers(1, 4, size=shape).astype(dt)  # no zeros: Mod divides


def op_case(op, ins, nout=1, opset=18, **attrs):
    """ins: list of ("name", shape, dtype) graph inputs or ("name", array)
    constants (initializers, or "" for an omitted optional input)."""
    inputs, feeds, inits, names = [], [], [], []
    for spec in ins:
        if spec == "":
            names.append("")
            continue
        if len(spec) == 3:
            name, shape, dt = spec
            inputs.append(vi(name, NP2ONNX[dt], list(shape)))
            feeds.append(data(shape, dt))
        else:
            name, arr = spec
            inits.append(init_t(name, arr))
        names.append(spec[0])
    outs = ["y%d" % i for i in range(nout)]
    node = helper.make_node(op, names, outs, **attrs)
    return model([node], inputs, [helper.make_tensor_value_info(o, 0, None) for o in outs], inits,
                 opset=opset), feeds


def check_shapes(m, feeds):
    r = pu.run_check(m, passes="shape-infer")
    ref = pu.ort_run(m, feeds)
    got = r.info["outputs"]
    assert len(got) == len(ref)
    for g, e in zip(got, ref):
        e = np.asarray(e)
        assert g["shape"] == list(e.shape), "%s: inferred %s, onnxruntime %s" % (
            g["name"], g["shape"], list(e.shape))
        assert g["dtype"] == NP2IR[str(e.dtype)], "%s: dtype %s, onnxruntime %s" % (
            g["name"], g["dtype"], e.dtype)


def add(name, op, ins, nout=1, opset=18, **attrs):
    def fn():
        check_shapes(*op_case(op, ins, nout, opset, **attrs))
    fn.__name__ = name
    S.case(fn)


f32, i64, b8 = np.float32, np.int64, np.bool_
I = lambda *v: np.array(v, np.int64)  # noqa: E731

# elementwise and broadcasting
add("add_broadcast", "Add", [("a", (2, 1, 4), f32), ("b", (3, 1), f32)])
add("pow_scalar_exp", "Pow", [("a", (2, 3), f32), ("b", (), f32)])
add("max_variadic", "Max", [("a", (2, 1), f32), ("b", (1, 3), f32), ("c", (3,), f32)])
add("equal_i64", "Equal", [("a", (4, 1), i64), ("b", (1, 5), i64)])
add("where_broadcast", "Where", [("c", (2, 1), b8), ("a", (1, 3), f32), ("b", (2, 3), f32)])
add("not_bool", "Not", [("a", (3, 2), b8)])
add("and_bool", "And", [("a", (3, 1), b8), ("b", (2,), b8)])
add("cast_to_i64", "Cast", [("a", (2, 3), f32)], to=pu.I64)
add("clip_min_max", "Clip", [("a", (2, 3), f32), ("lo", np.array(-0.5, f32)),
                             ("hi", np.array(0.5, f32))])
add("clip_max_only", "Clip", [("a", (2, 3), f32), "", ("hi", np.array(0.5, f32))])
add("sigmoid", "Sigmoid", [("a", (2, 3, 4), f32)])
add("identity", "Identity", [("a", (5,), f32)])
add("mod_i64", "Mod", [("a", (2, 3), i64), ("b", (3,), i64)])
# linear algebra
add("matmul_1d_2d", "MatMul", [("a", (4,), f32), ("b", (4, 3), f32)])
add("matmul_2d_1d", "MatMul", [("a", (2, 4), f32), ("b", (4,), f32)])
add("matmul_1d_1d", "MatMul", [("a", (4,), f32), ("b", (4,), f32)])
add("matmul_batch_broadcast", "MatMul", [("a", (2, 1, 3, 4), f32), ("b", (5, 4, 6), f32)])
add("matmul_2d_batch", "MatMul", [("a", (3, 4), f32), ("b", (2, 4, 5), f32)])
add("gemm_transb_bias", "Gemm", [("a", (3, 4), f32), ("b", (5, 4), f32), ("c", (5,), f32)],
    transB=1)
add("gemm_transa_colbias", "Gemm", [("a", (4, 3), f32), ("b", (4, 5), f32), ("c", (3, 1), f32)],
    transA=1)
add("gemm_no_c", "Gemm", [("a", (3, 4), f32), ("b", (4, 2), f32)], alpha=0.5)
# reductions
add("reduce_mean_axis_nokeep", "ReduceMean", [("x", (2, 3, 4), f32), ("ax", I(1))], keepdims=0)
add("reduce_sum_two_axes", "ReduceSum", [("x", (2, 3, 4), f32), ("ax", I(-1, 0))])
add("reduce_max_all_nokeep", "ReduceMax", [("x", (2, 3, 4), f32)], keepdims=0)
add("reduce_sum_noop_empty", "ReduceSum", [("x", (2, 3), f32), ("ax", np.zeros(0, np.int64))],
    noop_with_empty_axes=1)
add("reduce_mean_opset17_attr", "ReduceMean", [("x", (2, 3, 4), f32)], opset=17, axes=[-2])
add("softmax_axis1", "Softmax", [("x", (2, 3, 4), f32)], axis=1)
add("log_softmax", "LogSoftmax", [("x", (2, 3), f32)])
add("layer_norm", "LayerNormalization", [("x", (2, 3, 4), f32), ("s", np.ones(4, f32)),
                                         ("b", np.zeros(4, f32))], epsilon=1e-5)
# data movement
add("reshape_zero_minus1", "Reshape", [("x", (2, 3, 4), f32), ("s", I(0, -1))])
add("reshape_flat", "Reshape", [("x", (2, 3, 4), f32), ("s", I(-1))])
add("reshape_copy_middle", "Reshape", [("x", (2, 3, 4), f32), ("s", I(4, 0, -1))])
add("reshape_allowzero", "Reshape", [("x", (2, 3, 4), f32), ("s", I(6, 4))], allowzero=1)
add("transpose_default", "Transpose", [("x", (2, 3, 4), f32)])
add("transpose_perm", "Transpose", [("x", (2, 3, 4, 5), f32)], perm=[0, 2, 3, 1])
add("split_sizes", "Split", [("x", (2, 4), f32), ("s", I(1, 3))], nout=2, axis=1)
add("split_num_outputs_uneven", "Split", [("x", (2, 7), f32)], nout=3, axis=1, num_outputs=3)
add("split_equal_opset13", "Split", [("x", (4, 6), f32)], nout=2, opset=13)
add("concat_neg_axis", "Concat", [("a", (2, 3), f32), ("b", (2, 5), f32)], axis=-1)
add("slice_clamp_end", "Slice", [("x", (3, 10), f32), ("s", I(1)), ("e", I(100)), ("a", I(1))])
add("slice_negative_step", "Slice", [("x", (3, 10), f32), ("s", I(-1)), ("e", I(-1000)),
                                     ("a", I(1)), ("st", I(-2))])
add("slice_two_axes_steps", "Slice", [("x", (4, 10), f32), ("s", I(0, 1)), ("e", I(-1, 1000)),
                                      ("a", I(0, -1)), ("st", I(1, 3))])
add("slice_empty", "Slice", [("x", (6, 2), f32), ("s", I(5)), ("e", I(2))])
add("slice_neg_step_clamped_start", "Slice", [("x", (5,), f32), ("s", I(100)), ("e", I(0)),
                                              ("a", I(0)), ("st", I(-1))])
BIG = np.iinfo(np.int64).max
add("slice_huge_steps", "Slice", [("x", (3, 10), f32), ("s", I(0, -1)), ("e", I(BIG, -BIG)),
                                  ("a", I(0, 1)), ("st", I(BIG, -BIG))])
add("squeeze_axes", "Squeeze", [("x", (1, 3, 1, 4), f32), ("a", I(0, -2))])
add("squeeze_all", "Squeeze", [("x", (1, 3, 1, 4), f32)])
add("unsqueeze_neg", "Unsqueeze", [("x", (3, 4), f32), ("a", I(-1, 0))])
add("expand_up", "Expand", [("x", (3, 1), f32), ("s", I(2, 1, 4))])
add("expand_keeps_bigger", "Expand", [("x", (2, 3), f32), ("s", I(1, 3))])
add("flatten_axis0", "Flatten", [("x", (2, 3, 4), f32)], axis=0)
add("flatten_neg", "Flatten", [("x", (2, 3, 4), f32)], axis=-1)
add("flatten_default", "Flatten", [("x", (2, 3, 4), f32)])
add("shape_start_end", "Shape", [("x", (2, 3, 4, 5), f32)], start=1, end=-1)
add("shape_whole", "Shape", [("x", (2, 3), f32)])
add("constant_of_shape", "ConstantOfShape", [("s", I(2, 3))],
    value=pu.numpy_helper.from_array(np.array([7], np.int64)))
add("range_i64", "Range", [("a", np.array(1, np.int64)), ("b", np.array(10, np.int64)),
                           ("d", np.array(3, np.int64))])
add("range_f32_negative", "Range", [("a", np.array(2.0, f32)), ("b", np.array(-1.0, f32)),
                                    ("d", np.array(-0.7, f32))])
add("trilu_k", "Trilu", [("x", (3, 4), f32), ("k", np.array(1, np.int64))], upper=1)
add("gather_axis1_2d_idx", "Gather", [("x", (3, 5, 2), f32), ("i", (2, 4), i64)], axis=1)
add("gather_scalar_idx", "Gather", [("x", (3, 5), f32), ("i", np.array(1, np.int64))])
add("cumsum", "CumSum", [("x", (3, 4), f32), ("a", np.array(1, np.int64))])
add("dropout_mask", "Dropout", [("x", (3, 4), f32)], nout=2)
add("isnan", "IsNaN", [("x", (3, 4), f32)])
add("gather_nd_tuples", "GatherND", [("x", (4, 5, 6), f32), ("i", (2, 3, 2), i64)])
add("gather_nd_batch_dims", "GatherND", [("x", (2, 3, 4), f32),
                                         ("i", np.array([[[1], [2]], [[0], [2]]], np.int64))],
    batch_dims=1)
add("gather_nd_full_tuple", "GatherND", [("x", (2, 3), f32), ("i", np.array([[1, 2]], np.int64))])
add("tile", "Tile", [("x", (2, 3, 1), f32), ("r", I(2, 1, 4))])
add("tile_zero", "Tile", [("x", (2, 3), i64), ("r", I(0, 2))])
add("gather_elements", "GatherElements", [("x", (3, 4), f32),
                                          ("i", np.array([[1, -1, 0]], np.int64))], axis=1)
add("gather_elements_axis0", "GatherElements",
    [("x", (3, 4), f32), ("i", np.array([[2, 0, -3, 1], [1, 1, 0, 2]], np.int64))])
add("scatter_nd", "ScatterND", [("x", (4, 3), f32), ("i", np.array([[1], [3]], np.int64)),
                                ("u", (2, 3), f32)])
add("scatter_nd_elements", "ScatterND", [("x", (4, 3), f32), ("i", np.array([[1, 2]], np.int64)),
                                         ("u", (1,), f32)], reduction="add")

# older opsets: attributes the importer turns into the inputs the rules read
add("squeeze_opset11_attr", "Squeeze", [("x", (1, 3, 1), f32)], opset=11, axes=[2])
add("unsqueeze_opset11_attr", "Unsqueeze", [("x", (3,), f32)], opset=11, axes=[0, 2])
add("split_opset11_attr", "Split", [("x", (5, 2), f32)], nout=2, opset=11, split=[2, 3])
add("slice_opset9_attrs", "Slice", [("x", (4, 6), f32)], opset=9, starts=[1, -4], ends=[3, 100],
    axes=[0, 1])
add("reduce_sum_opset11_attr", "ReduceSum", [("x", (2, 3, 4), f32)], opset=11, axes=[1],
    keepdims=0)
add("clip_opset7_attrs", "Clip", [("x", (2, 3), f32)], opset=7, min=-0.1, max=0.2)


@S.case
def shape_chain_folds_into_reshape():
    # the ONNX exporter's way of computing a reshape target at run time
    N = helper.make_node
    nodes = [N("Shape", ["x"], ["sh"]), pu.const("i0", np.array(0, np.int64)),
             pu.const("i1", np.array(1, np.int64)), N("Gather", ["sh", "i0"], ["b"], axis=0),
             N("Gather", ["sh", "i1"], ["t"], axis=0), pu.const("z", I(0)),
             N("Unsqueeze", ["b", "z"], ["bu"]), N("Unsqueeze", ["t", "z"], ["tu"]),
             pu.const("h", I(4)), pu.const("m1", I(-1)),
             N("Concat", ["bu", "tu", "h", "m1"], ["tgt"], axis=0),
             N("Reshape", ["x", "tgt"], ["y"])]
    m = model(nodes, [vi("x", pu.F32, [2, 3, 16])], [helper.make_tensor_value_info("y", 0, None)])
    feeds = [data((2, 3, 16), f32)]
    r = pu.run_check(m, passes="shape-infer")
    assert r.info["outputs"][0]["shape"] == list(pu.ort_run(m, feeds)[0].shape)
    # everything but the Reshape was evaluated away
    assert r.info["after"] == {"Reshape": 1}, r.info["after"]


@S.case
def mask_from_shapes_folds_through_tile_and_gather_nd():
    # the dynamo exporter's mask code: indices built from shapes (Range,
    # Tile) select from a constant table with GatherND; all of it must fold
    N = helper.make_node
    nodes = [N("Shape", ["x"], ["sh"]), pu.const("i1", np.array(1, np.int64)),
             N("Gather", ["sh", "i1"], ["t"], axis=0), pu.const("zero", np.array(0, np.int64)),
             pu.const("one", np.array(1, np.int64)), N("Range", ["zero", "t", "one"], ["r"]),
             pu.const("ax", I(0)), N("Unsqueeze", ["r", "ax"], ["r1"]),
             pu.const("reps", I(2, 1)), N("Tile", ["r1", "reps"], ["rt"]),
             pu.const("tab", np.tril(np.ones((4, 4), np.float32))),
             N("GatherND", ["tab", "rt"], ["m"]), N("Add", ["x", "m"], ["y"])]
    m = model(nodes, [vi("x", pu.F32, [2, 2])], [helper.make_tensor_value_info("y", 0, None)])
    feeds = [data((2, 2), f32)]
    r = pu.run_check(m, passes="shape-infer")
    assert r.info["outputs"][0]["shape"] == list(pu.ort_run(m, feeds)[0].shape)
    assert r.info["after"] == {"Add": 1}, r.info["after"]


@S.case
def symbolic_dims_bound_from_inputs():
    N = helper.make_node
    m = model([N("Transpose", ["x"], ["y"], perm=[1, 0])], [vi("x", pu.F32, ["batch", 5])],
              [helper.make_tensor_value_info("y", 0, None)])
    r = pu.run_check(m, passes="shape-infer", extra=["--bind", "batch=3"])
    assert r.info["outputs"][0]["shape"] == [5, 3], r.info


@S.case
def unbound_dim_is_an_error():
    N = helper.make_node
    m = model([N("Relu", ["x"], ["y"])], [vi("x", pu.F32, ["batch", 5])],
              [helper.make_tensor_value_info("y", 0, None)])
    err = pu.run_check(m, passes="shape-infer", expect_fail=True)
    assert "batch" in err and "'x'" in err, err


def expect_error(m, *needles):
    err = pu.run_check(m, passes="shape-infer", expect_fail=True)
    for n in needles:
        assert n in err, "%r not in %r" % (n, err)


@S.case
def error_matmul_inner_dims():
    N = helper.make_node
    m = model([N("MatMul", ["a", "b"], ["y"], name="/h.0/attn/MatMul")],
              [vi("a", pu.F32, [2, 16, 64]), vi("b", pu.F32, [32, 64])],
              [helper.make_tensor_value_info("y", 0, None)])
    expect_error(m, "shape-infer", "/h.0/attn/MatMul", "(MatMul)", "64", "32", "[2,16,64]",
                 "[32,64]")


@S.case
def error_reshape_size():
    N = helper.make_node
    m = model([N("Reshape", ["x", "s"], ["y"], name="rs")], [vi("x", pu.F32, [2, 3])],
              [helper.make_tensor_value_info("y", 0, None)], [init_t("s", I(4, 2))])
    expect_error(m, "'rs' (Reshape)", "[2,3]", "[4,2]")


@S.case
def error_broadcast():
    N = helper.make_node
    m = model([N("Add", ["a", "b"], ["y"], name="add0")],
              [vi("a", pu.F32, [2, 3]), vi("b", pu.F32, [4])],
              [helper.make_tensor_value_info("y", 0, None)])
    expect_error(m, "'add0' (Add)", "[2,3]", "[4]")


@S.case
def error_hostile_sizes_are_errors_not_crashes():
    N = helper.make_node
    m = model([N("ConstantOfShape", ["s"], ["c"], name="cos"), N("Add", ["x", "c"], ["y"])],
              [vi("x", pu.F32, [1])], [helper.make_tensor_value_info("y", 0, None)],
              [init_t("s", I(1 << 40, 1 << 40))])
    expect_error(m, "'cos' (ConstantOfShape)", "2^48")
    m = model([N("Range", ["a", "b", "d"], ["r"], name="rg"), N("Add", ["x", "r"], ["y"])],
              [vi("x", pu.F32, [1])], [helper.make_tensor_value_info("y", 0, None)],
              [init_t("a", np.array(0.0, f32)), init_t("b", np.array(1e30, f32)),
               init_t("d", np.array(1.0, f32))])
    expect_error(m, "'rg' (Range)")


@S.case
def error_declared_output_shape():
    N = helper.make_node
    m = model([N("Relu", ["x"], ["y"])], [vi("x", pu.F32, [2, 3])], [vi("y", pu.F32, [2, 5])])
    expect_error(m, "'y'", "[2,5]", "[2,3]")


if __name__ == "__main__":
    pu.init(sys.argv)
    sys.exit(S.run())
