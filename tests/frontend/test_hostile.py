"""Hostile and malformed ONNX models: each must be rejected with exit 1 and a
message naming what is wrong (never a crash or sanitizer report); external
data is validated without being read; symbolic dims bind or fail clearly.
"""
import base64
import os
import random

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

import deep_nesting
import fe_common as fc

F = T.FLOAT


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


FUZZ_REGRESSIONS = [
    "CA46WgovCgF4EgF6IglSZWR1Y2VNYXgqCwoEenhlc0ABoAEDKg8KCGtlZXBkaW1zGACgAQISAWdaEwoBeBIOCgwIARIICgIIAgoCCANiDwoBehIKCggIARIECgIIAkIECgAQEQ==",
    "CA46YQoqCgF4EgF6IgRDbGlwKg0KA21heBUAAABroAEBKg0KA21pZhUAAIC/oAEBEgFnWhMKAXgSDgoMCAYSCAoCCAIKAggDYhsKAXoSFgoUCAESEAoGEgR6X2RPcgYSBHpfZDFCBAoAEAU=",
]


def good_model(opset=17):
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Relu", ["y"], ["z"], name="act")]
    return fc.model(nodes, [vi("x", F, [2, 3])], [vi("z", F, [2, 4])], [w], opset=opset)


def expect_error(path, *needles, args=()):
    rc, out = fc.run([path] + list(args))
    msg = out.splitlines()[0] if out else ""
    ok = rc == 1 and msg.startswith("error: ")
    for n in needles:
        ok = ok and n in msg
    fc.check(ok, "%s: expected an error naming %s, got rc=%d: %s" % (os.path.basename(path),
                                                                      needles, rc, out))
    return msg


def write_bytes(name, data):
    p = os.path.join(fc.WORK, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def test_garbage():
    good = good_model().SerializeToString()
    expect_error(write_bytes("empty.onnx", b""), "empty")
    # truncated at several points: protobuf-c rejects, or the cut lands
    # between fields and the model fails a later check; either way exit 1
    for cut in (1, 7, len(good) // 3, len(good) // 2, len(good) - 3):
        p = write_bytes("trunc_%d.onnx" % cut, good[:cut])
        rc, out = fc.run([p])
        fc.check(rc == 1 and out.startswith("error: ") and "trunc_" in out,
                 "truncated at %d: rc=%d %s" % (cut, rc, out))
    expect_error(write_bytes("text.onnx", b"this is not a protobuf\n" * 10), "text.onnx")
    rnd = random.Random(1234)
    for i in range(40):
        data = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 400)))
        p = write_bytes("random_%d.onnx" % i, data)
        rc, out = fc.run([p])
        fc.check(rc == 1 and out.startswith("error: "), "random bytes %d: rc=%d %s" % (i, rc, out))
    # bit flips of a valid model: never a crash (import may succeed or fail)
    for i in range(40):
        b = bytearray(good)
        for _ in range(3):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        fc.run([write_bytes("flip_%d.onnx" % i, bytes(b))])
    # inputs libFuzzer found crashing earlier versions (fuzz/fuzz_onnx_import.c):
    # an empty string attribute (memchr on NULL) and a huge Clip bound cast
    # to int32; now they must import or fail cleanly
    for i, b64 in enumerate(FUZZ_REGRESSIONS):
        fc.run([write_bytes("fuzz_regression_%d.onnx" % i, base64.b64decode(b64))])
    # through the buffer entry point too
    rc, out = fc.run([write_bytes("trunc_buf.onnx", good[:len(good) // 2]), "--buffer"])
    fc.check(rc == 1 and "<buffer>" in out, "buffer truncated: %s" % out)


def test_structure():
    # cyclic graph: a -> b -> a
    nodes = [helper.make_node("Relu", ["x2"], ["x1"], name="n1"),
             helper.make_node("Neg", ["x1"], ["x2"], name="n2"),
             helper.make_node("Add", ["x", "x1"], ["z"], name="n3")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])])
    expect_error(fc.save(m, "cycle.onnx", check_model=False), "cycle")

    # acyclic but listed out of order (ONNX forbids it; tolerate it): the
    # importer must sort producers before consumers
    nodes = [helper.make_node("Add", ["b", "a"], ["z"], name="last"),
             helper.make_node("Neg", ["a"], ["b"], name="middle"),
             helper.make_node("Relu", ["x"], ["a"], name="first")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])])
    rc, out = fc.run([fc.save(m, "unordered.onnx", check_model=False), "--dump"])
    order = [n["name"] for n in fc.Dump(out).nodes]
    fc.check(rc == 0 and order == ["first", "middle", "last"], "unordered graph: %s" % out)

    nodes = [helper.make_node("Add", ["x", "nowhere"], ["z"], name="adder")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])])
    expect_error(fc.save(m, "undef.onnx", check_model=False), "adder", "nowhere")

    nodes = [helper.make_node("Relu", ["x"], ["z"], name="r1"),
             helper.make_node("Neg", ["x"], ["z"], name="r2")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])])
    expect_error(fc.save(m, "dup_out.onnx", check_model=False), "'z'", "more than once")

    nodes = [helper.make_node("Relu", ["x"], ["x"], name="r1")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("x", F, [2])])
    expect_error(fc.save(m, "redefine_input.onnx", check_model=False), "'x'")

    m = fc.model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2])], [vi("q", F, [2])])
    expect_error(fc.save(m, "bad_output.onnx", check_model=False), "'q'")

    m = onnx.ModelProto(ir_version=8)
    m.opset_import.append(helper.make_opsetid("", 17))
    expect_error(fc.save(m, "no_graph.onnx", check_model=False), "empty model")

    m = good_model()
    del m.graph.node[:]
    del m.graph.output[:]
    expect_error(fc.save(m, "no_nodes.onnx", check_model=False), "empty model")

    m = good_model()
    m.ClearField("ir_version")
    expect_error(fc.save(m, "no_irv.onnx", check_model=False), "ir_version")

    m = good_model()
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    expect_error(fc.save(m, "no_default_opset.onnx", check_model=False), "opset")

    m = good_model(opset=17)
    m.opset_import[0].version = 29
    expect_error(fc.save(m, "opset29.onnx", check_model=False), "29")


def test_unsupported():
    nodes = [helper.make_node("Conv", ["x", "w"], ["z"], name="conv0")]
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    m = fc.model(nodes, [vi("x", F, [1, 1, 2, 2])], [vi("z", F, [1, 1, 2, 2])], [w], opset=13)
    expect_error(fc.save(m, "conv.onnx"), "'conv0'", "Conv", "domain ''", "opset 13")

    # an op the table knows but not at this opset (Gelu arrived at 20)
    nodes = [helper.make_node("Gelu", ["x"], ["z"], name="g0")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])], opset=17)
    expect_error(fc.save(m, "gelu17.onnx", check_model=False), "'g0'", "Gelu", "opset 17", "20")

    # node from another domain
    nodes = [helper.make_node("FusedThing", ["x"], ["z"], name="ft", domain="com.microsoft")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])], opset=17)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    expect_error(fc.save(m, "ms.onnx", check_model=False), "'ft'", "FusedThing",
                 "domain 'com.microsoft'", "opset 1")

    # unknown domain not even imported
    nodes = [helper.make_node("Relu", ["x"], ["z"], name="rx", domain="org.unknown")]
    m = fc.model(nodes, [vi("x", F, [2])], [vi("z", F, [2])], opset=17)
    expect_error(fc.save(m, "unk_domain.onnx", check_model=False), "'rx'", "org.unknown")


def test_dtypes():
    # initializer with a dtype hetc lacks (string) and one ONNX lacks (99)
    for dt, needle in ((T.STRING, "STRING"), (T.FLOAT8E4M3FN, "FLOAT8E4M3FN"), (99, "99")):
        t = onnx.TensorProto(name="bad", data_type=dt, dims=[1])
        t.raw_data = b"\0"
        nodes = [helper.make_node("Identity", ["bad"], ["z"])]
        m = fc.model(nodes, [], [vi("z", F, [1])], [t])
        expect_error(fc.save(m, "dtype_%d.onnx" % dt, check_model=False), "'bad'", needle)
    m = fc.model([helper.make_node("Relu", ["x"], ["z"])], [vi("x", T.COMPLEX64, [2])],
                 [vi("z", F, [2])])
    expect_error(fc.save(m, "dtype_input.onnx", check_model=False), "'x'", "COMPLEX64")
    # Cast to an unsupported dtype
    m = fc.model([helper.make_node("Cast", ["x"], ["z"], to=T.FLOAT8E5M2, name="c8")],
                 [vi("x", F, [2])], [vi("z", T.FLOAT8E5M2, [2])])
    expect_error(fc.save(m, "cast_f8.onnx", check_model=False), "'c8'", "to")
    # data size mismatch
    t = onnx.TensorProto(name="w", data_type=F, dims=[4])
    t.raw_data = b"\0" * 12
    m = fc.model([helper.make_node("Relu", ["w"], ["z"])], [], [vi("z", F, [4])], [t])
    expect_error(fc.save(m, "short_raw.onnx", check_model=False), "'w'", "12")
    t = onnx.TensorProto(name="w", data_type=F, dims=[3])
    t.float_data.extend([1.0, 2.0])
    m = fc.model([helper.make_node("Relu", ["w"], ["z"])], [], [vi("z", F, [3])], [t])
    expect_error(fc.save(m, "short_typed.onnx", check_model=False), "'w'")
    # negative dims: in an initializer and in an input
    t = onnx.TensorProto(name="w", data_type=F, dims=[-2])
    m = fc.model([helper.make_node("Relu", ["w"], ["z"])], [], [vi("z", F, [2])], [t])
    expect_error(fc.save(m, "neg_init.onnx", check_model=False), "'w'", "negative")
    m = fc.model([helper.make_node("Relu", ["x"], ["z"])], [vi("x", F, [2, -3])],
                 [vi("z", F, [2, 3])])
    expect_error(fc.save(m, "neg_input.onnx", check_model=False), "'x'", "negative")
    # element count overflow must not wrap around
    t = onnx.TensorProto(name="huge", data_type=F, dims=[1 << 40, 1 << 40])
    m = fc.model([helper.make_node("Relu", ["huge"], ["z"])], [], [vi("z", F, [1])], [t])
    expect_error(fc.save(m, "overflow.onnx", check_model=False), "'huge'")


def ext_model(name, location, offset=None, length=None, shape=(4, 8)):
    t = onnx.TensorProto(name="w", data_type=F, dims=list(shape))
    t.data_location = onnx.TensorProto.EXTERNAL
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k, v in kv:
        e = t.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("MatMul", ["x", "w"], ["z"], name="mm")]
    m = fc.model(nodes, [vi("x", F, [2, shape[0]])], [vi("z", F, [2, shape[1]])], [t])
    d = os.path.join(fc.WORK, "ext", name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    return path, d


def test_external():
    data = np.arange(64, dtype=np.float32)  # 256 bytes; w is 4x8 = 128 bytes at offset 64
    p, d = ext_model("good", "weights.bin", offset=64, length=128)
    data.tofile(os.path.join(d, "weights.bin"))
    rc, out = fc.run([p, "--dump", "--load", "w"])
    dump = fc.Dump(out)
    w = dump.values.get("w", {})
    fc.check(rc == 0 and w.get("kind") == "param" and "weights.bin@64+128" in w.get("ext", ""),
             "good external data: %s" % out)
    # the mapped bytes are the file's bytes 64..192 (numpy is the oracle)
    want = ",".join("%.9g" % x for x in data[16:48])
    fc.check(w.get("data") == want, "external data bytes differ: %s vs %s" % (w.get("data"), want))
    # subdirectory inside the model dir is fine
    p, d = ext_model("subdir", "sub/w.bin")
    os.makedirs(os.path.join(d, "sub"), exist_ok=True)
    np.zeros(32, np.float32).tofile(os.path.join(d, "sub", "w.bin"))
    rc, out = fc.run([p])
    fc.check(rc == 0, "external data in a subdir: %s" % out)

    p, d = ext_model("abs", os.path.join(fc.WORK, "ext", "good", "weights.bin"))
    expect_error(p, "'w'", "absolute", "model.onnx")
    p, d = ext_model("dotdot", "../good/weights.bin")
    expect_error(p, "'w'", "..", "model.onnx")
    p, d = ext_model("dotdot2", "sub/../../good/weights.bin")
    expect_error(p, "'w'", "..")
    p, d = ext_model("symlink", "link.bin")
    link = os.path.join(d, "link.bin")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.join(fc.WORK, "ext", "good", "weights.bin"), link)
    expect_error(p, "'w'", "link.bin", "outside")
    p, d = ext_model("missing", "nothere.bin")
    expect_error(p, "'w'", "nothere.bin", "model.onnx")
    p, d = ext_model("beyond", "w.bin", offset=200, length=128)
    np.zeros(64, np.float32).tofile(os.path.join(d, "w.bin"))
    expect_error(p, "'w'", "w.bin", "beyond")
    p, d = ext_model("mismatch", "w.bin", offset=0, length=100)
    np.zeros(64, np.float32).tofile(os.path.join(d, "w.bin"))
    expect_error(p, "'w'", "w.bin", "length 100")
    p, d = ext_model("badoff", "w.bin", offset="-5")
    np.zeros(64, np.float32).tofile(os.path.join(d, "w.bin"))
    expect_error(p, "'w'", "offset")
    p, d = ext_model("dir", "adir")
    os.makedirs(os.path.join(d, "adir"), exist_ok=True)
    expect_error(p, "'w'", "adir")


def test_external_huge():
    """A 3 GiB sparse weight file imports without being read: peak RSS of the
    importer stays far below the data size (a memory bound, not a timing)."""
    cols = 1 << 16
    rows = 3 * (1 << 12)           # 12288 x 65536 x 4 B = 3 GiB
    p, d = ext_model("huge", "huge.bin", offset=0, length=rows * cols * 4, shape=(rows, cols))
    big = os.path.join(d, "huge.bin")
    with open(big, "wb") as f:
        f.truncate(rows * cols * 4)  # sparse: no disk blocks
    rc, out = fc.run([p, "--dump"])
    rss = [int(l.split("=")[1]) for l in out.splitlines() if l.startswith("maxrss_kb=")]
    fc.check(rc == 0 and rss and rss[0] < 200 * 1024,
             "3 GiB external model: rc=%d rss=%s %s" % (rc, rss, out[:300]))
    fc.check("huge.bin@0+%d" % (rows * cols * 4) in out, "huge ext ref: %s" % out[:300])
    os.unlink(big)


def test_symbolic_dims():
    nodes = [helper.make_node("Relu", ["x"], ["z"])]
    m = fc.model(nodes, [vi("x", F, ["batch_size", "seq", 8])], [vi("z", F, ["batch_size", "seq", 8])])
    p = fc.save(m, "sym.onnx")
    expect_error(p, "'x'", "'batch_size'")
    rc, out = fc.run([p, "--batch", "3"])
    fc.check(rc == 1 and "'seq'" in out, "seq unbound: %s" % out)
    rc, out = fc.run([p, "--batch", "3", "--seq", "5"])
    d = fc.Dump(out)
    fc.check(rc == 0 and d.inputs.get("x") == ("f32", "[3,5,8]") and
             d.outputs.get("z") == ("f32", "[3,5,8]"), "bound dims: %s" % out)
    rc, out = fc.run([p, "--bind", "batch_size=2", "--bind", "seq=7"])
    fc.check(rc == 0 and fc.Dump(out).inputs.get("x") == ("f32", "[2,7,8]"), "--bind: %s" % out)
    rc, out = fc.run([p, "--allow-unbound"])
    fc.check(rc == 0 and fc.Dump(out).inputs.get("x") == ("f32", "[batch_size,seq,8]"),
             "allow-unbound: %s" % out)
    rc, out = fc.run([p, "--allow-unbound", "--bind-after", "batch_size=4", "--bind-after", "seq=6"])
    fc.check(rc == 0 and fc.Dump(out).inputs.get("x") == ("f32", "[4,6,8]"), "bind after: %s" % out)
    rc, out = fc.run([p, "--allow-unbound", "--bind-after", "batch_size=4"])
    fc.check(rc == 1 and "'seq'" in out and "'x'" in out, "bind after partial: %s" % out)
    # a dim with neither value nor name
    m = fc.model(nodes, [vi("x", F, [None, 8])], [vi("z", F, [None, 8])])
    expect_error(fc.save(m, "anon_dim.onnx"), "'x'", "axis 0")


def test_deep_nesting():
    # If bodies nested 3,000 deep overflowed protobuf-c's recursive unpack
    # (SIGSEGV); the wire pre-scan refuses past 64 subgraph levels.  n If
    # nodes make n + 1 graphs: 63 pass the scan (and then fail a later
    # check: the graph has no outputs), 64 are one level too many.
    p = write_bytes("if_nested_63.onnx", deep_nesting.if_nested(63))
    rc, out = fc.run([p])
    fc.check(rc == 1 and "nested more than" not in out, "63 nested Ifs: rc=%d %s" % (rc, out))
    for n in (64, 3000):
        expect_error(write_bytes("if_nested_%d.onnx" % n, deep_nesting.if_nested(n)),
                     "if_nested_%d.onnx" % n, "subgraphs nested more than 64 deep")
        expect_error(write_bytes("if_nested_%d.onnx" % n, deep_nesting.if_nested(n)),
                     "<buffer>", "subgraphs nested more than 64 deep", args=["--buffer"])
    # no subgraph at all: sequence(sequence(...)) types 20,000 deep
    expect_error(write_bytes("seq_nested.onnx", deep_nesting.sequence_nested(20000)),
                 "seq_nested.onnx", "messages nested more than 256 deep", "TypeProto")
    # the libFuzzer corpus copies (fuzz/CMakeLists.txt) replay here in every build
    reg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_regress")
    for name in sorted(os.listdir(reg)):
        expect_error(os.path.join(reg, name), name)


fc.init()
test_garbage()
test_structure()
test_unsupported()
test_dtypes()
test_external()
test_external_huge()
test_symbolic_dims()
test_deep_nesting()
fc.finish()
