"""const-fold, dce and the pass manager: what folds (a brute-force oracle of
the rule over the ONNX graph), what must not (parameters, giant outputs),
what dce removes (a liveness oracle), dumps, errors, verbose output; every
rewritten graph still computes what onnxruntime computes."""
import os
import sys
import tempfile

import numpy as np
from onnx import helper

import passes_util as pu
from passes_util import F32, const, init_t, model, vi

S = pu.Suite()
rng = np.random.default_rng(5)
N = helper.make_node


def out(name):
    return helper.make_tensor_value_info(name, 0, None)


def foldable_nodes(m):
    """Oracle: a node folds iff each input is a Constant-node output, a
    non-float or scalar initializer (imported as CONST), or the output of a
    node that folds.  Float initializers of rank >= 1 are parameters."""
    const_vals = set()
    for t in m.graph.initializer:
        if t.data_type != F32 or len(t.dims) == 0:
            const_vals.add(t.name)
    count = 0
    for n in m.graph.node:
        if n.op_type == "Constant":
            const_vals.update(n.output)
            continue
        ins = [i for i in n.input if i]
        if ins and all(i in const_vals for i in ins):
            const_vals.update(n.output)
            count += 1
    return count


def compute_nodes(m):
    return sum(1 for n in m.graph.node if n.op_type != "Constant")


def run_and_compare(m, feeds, passes):
    """Histogram after `passes`; numerics after `passes` then shape-infer
    (the executor needs every shape; whatever `passes` folded stays folded)."""
    r = pu.run_check(m, passes=passes)
    ran = pu.run_check(m, feeds, passes=passes + ",shape-infer")
    for i, (g, e) in enumerate(zip(ran.outputs, pu.ort_run(m, feeds))):
        pu.assert_close(g, e, "output %d" % i)
    return r


def total(hist):
    return sum(hist.values())


@S.case
def const_fold_chain():
    nodes = [const("a", np.arange(3, dtype=np.float32)), const("b", np.ones(3, np.float32)),
             const("two", np.array(2.0, np.float32)), N("Add", ["a", "b"], ["c"]),
             N("Mul", ["c", "two"], ["d"]), N("Sqrt", ["d"], ["e"]), N("Add", ["x", "e"], ["y"])]
    m = model(nodes, [vi("x", F32, [4, 3])], [out("y")])
    r = run_and_compare(m, [rng.standard_normal((4, 3)).astype(np.float32)], "const-fold")
    assert total(r.info["after"]) == compute_nodes(m) - foldable_nodes(m), r.info


@S.case
def const_fold_integer_shape_math():
    nodes = [const("s", np.array([2, 6], np.int64)), const("k", np.array([1, 2], np.int64)),
             N("Mul", ["s", "k"], ["s2"]), N("Reshape", ["x", "s2"], ["y"])]
    m = model(nodes, [vi("x", F32, [4, 6])], [out("y")])
    r = run_and_compare(m, [rng.standard_normal((4, 6)).astype(np.float32)], "const-fold")
    assert total(r.info["after"]) == compute_nodes(m) - foldable_nodes(m), r.info


@S.case
def params_are_never_folded():
    # W is a trained parameter: W + 1 must stay a node even though both sides have data
    nodes = [const("one", np.array(1.0, np.float32)), N("Add", ["W", "one"], ["w1"]),
             N("Mul", ["x", "w1"], ["y"])]
    m = model(nodes, [vi("x", F32, [2, 3])], [out("y")], [init_t("W", np.ones(3, np.float32))])
    r = run_and_compare(m, [rng.standard_normal((2, 3)).astype(np.float32)],
                        "shape-infer,const-fold")
    assert r.after("Add") == 1 and foldable_nodes(m) == 0, r.info


@S.case
def float_buffer_feeding_a_comparison_folds():
    # a float initializer whose only use is a comparison gets no gradient: a buffer
    mask = np.tril(np.ones((4, 4), np.float32))
    nodes = [const("zero", np.array(0.0, np.float32)), const("big", np.array(-1e9, np.float32)),
             N("Equal", ["mb", "zero"], ["hid"]), N("Where", ["hid", "big", "x"], ["y"])]
    m = model(nodes, [vi("x", F32, [4, 4])], [out("y")], [init_t("mb", mask)])
    r = run_and_compare(m, [rng.standard_normal((4, 4)).astype(np.float32)], "const-fold")
    assert r.info["after"] == {"Where": 1}, r.info


@S.case
def float_buffer_cast_to_bool_condition_folds():
    mask = np.tril(np.ones((4, 4), np.float32))
    nodes = [const("big", np.array(-1e9, np.float32)), N("Cast", ["mb"], ["keep"], to=pu.BOOL),
             N("Where", ["keep", "x", "big"], ["y"])]
    m = model(nodes, [vi("x", F32, [4, 4])], [out("y")], [init_t("mb", mask)])
    r = run_and_compare(m, [rng.standard_normal((4, 4)).astype(np.float32)], "const-fold")
    assert r.info["after"] == {"Where": 1}, r.info


@S.case
def float_param_feeding_arithmetic_stays():
    # a float initializer read as a mask (Cast to bool) and added to x: the
    # importer takes it for an exporter dedup of a weight and a mask with
    # equal values (frontend/param_untie.c) and unties it; the mask's copy
    # takes no gradient, is a buffer and folds, the Add keeps a parameter
    w = np.tril(np.ones((4, 4), np.float32))
    nodes = [N("Cast", ["mb"], ["keep"], to=pu.BOOL), N("Add", ["x", "mb"], ["xa"]),
             const("big", np.array(-1e9, np.float32)), N("Where", ["keep", "xa", "big"], ["y"])]
    m = model(nodes, [vi("x", F32, [4, 4])], [out("y")], [init_t("mb", w)])
    r = run_and_compare(m, [rng.standard_normal((4, 4)).astype(np.float32)], "const-fold")
    assert r.after("Cast") == 0 and r.after("Add") == 1, r.info


@S.case
def giant_constants_are_not_materialised():
    # 5000 x 4000 f32 = 80 MB > the 64 MiB cap: stays a node; a small one folds
    nodes = [const("big", np.array([5000, 4000], np.int64)),
             const("small", np.array([100, 100], np.int64)),
             N("ConstantOfShape", ["big"], ["cb"]), N("ConstantOfShape", ["small"], ["cs"]),
             N("ReduceSum", ["cb"], ["rb"], keepdims=0), N("ReduceSum", ["cs"], ["rs"], keepdims=0),
             N("Add", ["rb", "rs"], ["r"]), N("Add", ["x", "r"], ["y"])]
    m = model(nodes, [vi("x", F32, [3])], [out("y")])
    r = pu.run_check(m, passes="shape-infer,const-fold")
    assert r.after("ConstantOfShape") == 1 and r.after("ReduceSum") == 1, r.info


def live_nodes(m):
    """Oracle: nodes with an output reaching a graph output (backwards closure)."""
    need = {o.name for o in m.graph.output}
    live = 0
    for n in reversed([n for n in m.graph.node if n.op_type != "Constant"]):
        if any(o in need for o in n.output):
            live += 1
            need.update(i for i in n.input if i)
    return live


@S.case
def dce_removes_dead_branches():
    nodes = [N("Relu", ["x"], ["a"]), N("Sigmoid", ["x"], ["dead1"]), N("Exp", ["dead1"], ["dead2"]),
             N("Split", ["a"], ["s0", "s1"], axis=1, num_outputs=2), N("Neg", ["s1"], ["dead3"]),
             N("Tanh", ["s0"], ["y"])]
    m = model(nodes, [vi("x", F32, [2, 4])], [out("y")])
    r = run_and_compare(m, [rng.standard_normal((2, 4)).astype(np.float32)], "shape-infer,dce")
    assert total(r.info["after"]) == live_nodes(m), r.info
    assert r.after("Split") == 1, "a node with one used output is live: %s" % r.info


@S.case
def dce_keeps_graph_outputs():
    nodes = [N("Relu", ["x"], ["a"]), N("Neg", ["a"], ["b"])]
    m = model(nodes, [vi("x", F32, [3])], [out("a"), out("b")])
    r = run_and_compare(m, [rng.standard_normal(3).astype(np.float32)], "dce")
    assert total(r.info["after"]) == live_nodes(m) == 2, r.info


@S.case
def folded_graph_output_still_runs():
    # Shape(x) is a graph output: it becomes a constant output, still produced by a run
    m = model([N("Shape", ["x"], ["s"]), N("Relu", ["x"], ["y"])], [vi("x", F32, [2, 3])],
              [out("s"), out("y")])
    r = run_and_compare(m, [rng.standard_normal((2, 3)).astype(np.float32)], "shape-infer,dce")
    assert r.info["after"] == {"Relu": 1}, r.info


@S.case
def dumps_after_each_pass():
    m = model([N("Relu", ["x"], ["y"])], [vi("x", F32, [3])], [out("y")])
    with tempfile.TemporaryDirectory() as d:
        dump = os.path.join(d, "ir")
        pu.run_check(m, passes="shape-infer,const-fold,dce",
                     extra=["--dump-after", "all", "--dump-dir", dump])
        names = sorted(os.listdir(dump))
        assert names == ["00-import.ir", "01-shape-infer.ir", "02-const-fold.ir", "03-dce.ir"], names
        for n in names:
            with open(os.path.join(dump, n)) as f:
                assert "Relu" in f.read(), n
    with tempfile.TemporaryDirectory() as d:
        pu.run_check(m, passes="shape-infer,dce", extra=["--dump-after", "dce", "--dump-dir", d])
        assert sorted(os.listdir(d)) == ["02-dce.ir"], os.listdir(d)


@S.case
def unknown_pass_lists_known_ones():
    m = model([N("Relu", ["x"], ["y"])], [vi("x", F32, [3])], [out("y")])
    err = pu.run_check(m, passes="shape-infer,bogus", expect_fail=True)
    for p in ("bogus", "shape-infer", "const-fold", "dce", "canonicalize"):
        assert p in err, err


@S.case
def verbose_one_line_per_pass():
    m = model([N("Relu", ["x"], ["y"])], [vi("x", F32, [3])], [out("y")])
    r = pu.run_check(m, passes="shape-infer,dce,dce", extra=["-v"])
    lines = [l for l in r.stderr.splitlines() if "pass " in l]
    assert len(lines) == 3 and "shape-infer" in lines[0] and "ms" in lines[0], r.stderr


if __name__ == "__main__":
    pu.init(sys.argv)
    sys.exit(S.run())
