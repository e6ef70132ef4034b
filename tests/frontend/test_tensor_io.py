"""Tensor files: .npy (v1/v2/v3) and ONNX TensorProto .pb (raw and typed
fields) read by hetc and written back as .npy; numpy and onnx.numpy_helper
are the oracles.  Malformed files are rejected with exit 1.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

import fe_common as fc

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.bool_, np.uint8, np.int16, np.int8,
          np.float16]
SHAPES = [(), (0,), (5,), (2, 3), (2, 1, 3, 2)]


def sample(dt, shape, rng):
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.floating):
        return (rng.standard_normal(shape) * 100).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def roundtrip(src, want, tag):
    out = os.path.join(fc.WORK, tag + ".out.npy")
    if os.path.exists(out):
        os.unlink(out)
    rc, text = fc.run(["--tensor", src, "--write", out])
    if not fc.check(rc == 0, "%s: read/write failed: %s" % (tag, text)):
        return
    got = np.load(out)
    fc.check(got.dtype == want.dtype and got.shape == want.shape and
             np.array_equal(got, want, equal_nan=True),
             "%s: round trip differs: %s %s vs %s %s" % (tag, got.dtype, got.shape, want.dtype,
                                                         want.shape))
    # written files are plain .npy that numpy's own header parser accepts
    with open(out, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f) if major == 1 else None
    fc.check(not [p for p in os.listdir(fc.WORK) if ".tmp" in p], "temp file left behind")


def test_npy():
    rng = np.random.default_rng(7)
    for dt in DTYPES:
        for shape in SHAPES:
            a = sample(dt, shape, rng)
            tag = "npy_%s_%s" % (np.dtype(dt).str.replace("<", "l").replace("|", "p"),
                                 "x".join(map(str, shape)) or "scalar")
            p = os.path.join(fc.WORK, tag + ".npy")
            np.save(p, a)
            roundtrip(p, a, tag)
    # header versions 2.0 and 3.0
    a = sample(np.float32, (3, 4), rng)
    for ver in ((2, 0), (3, 0)):
        p = os.path.join(fc.WORK, "npy_v%d.npy" % ver[0])
        with open(p, "wb") as f:
            np.lib.format.write_array(f, a, version=ver)
        roundtrip(p, a, "npy_v%d" % ver[0])


def expect_error(path, needle):
    rc, out = fc.run(["--tensor", path])
    fc.check(rc == 1 and out.startswith("error: ") and needle in out,
             "%s: expected error with %r, got rc=%d %s" % (os.path.basename(path), needle, rc, out))


def test_npy_bad():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = os.path.join(fc.WORK, "fortran.npy")
    np.save(p, np.asfortranarray(a))
    expect_error(p, "Fortran")
    p = os.path.join(fc.WORK, "bigendian.npy")
    np.save(p, a.astype(">f4"))
    expect_error(p, ">f4")
    p = os.path.join(fc.WORK, "complex.npy")
    np.save(p, a.astype(np.complex64))
    expect_error(p, "<c8")
    good = os.path.join(fc.WORK, "good.npy")
    np.save(good, a)
    data = open(good, "rb").read()
    for cut in (3, 9, 40, len(data) - 4):
        p = os.path.join(fc.WORK, "trunc%d.npy" % cut)
        open(p, "wb").write(data[:cut])
        expect_error(p, "trunc%d.npy" % cut)
    p = os.path.join(fc.WORK, "extra.npy")
    open(p, "wb").write(data + b"\0\0\0\0")
    expect_error(p, "bytes")
    p = os.path.join(fc.WORK, "t.txt")
    open(p, "w").write("hello")
    expect_error(p, "unknown tensor file type")
    expect_error(os.path.join(fc.WORK, "absent.npy"), "absent.npy")


def test_pb():
    rng = np.random.default_rng(11)
    onnx_dtypes = DTYPES + [np.uint16, np.uint32, np.uint64]
    for dt in onnx_dtypes:
        for shape in ((4,), (2, 3)):
            a = sample(dt, shape, rng)
            tag = "pb_raw_%s_%d" % (np.dtype(dt).name, len(shape))
            p = os.path.join(fc.WORK, tag + ".pb")
            t = numpy_helper.from_array(a, "t")
            open(p, "wb").write(t.SerializeToString())
            if dt in (np.uint16, np.uint32, np.uint64):
                # not .npy-writable: read only, check the reported shape
                rc, out = fc.run(["--tensor", p])
                fc.check(rc == 0 and ("shape=%s" % ",".join(map(str, shape))) in out,
                         "%s: %s" % (tag, out))
                continue
            roundtrip(p, numpy_helper.to_array(t), tag)
            # typed fields (float_data / int32_data / int64_data / ...)
            tag = "pb_typed_%s_%d" % (np.dtype(dt).name, len(shape))
            p = os.path.join(fc.WORK, tag + ".pb")
            tt = helper.make_tensor("t", helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape,
                                    a.flatten().tolist(), raw=False)
            fc.check(not tt.HasField("raw_data"), "%s: helper produced raw data" % tag)
            open(p, "wb").write(tt.SerializeToString())
            roundtrip(p, numpy_helper.to_array(tt), tag)
    # bad .pb: truncated, wrong size, string dtype
    t = numpy_helper.from_array(np.arange(8, dtype=np.float32), "t").SerializeToString()
    p = os.path.join(fc.WORK, "trunc.pb")
    open(p, "wb").write(t[:len(t) - 5])
    expect_error(p, "trunc.pb")
    bad = onnx.TensorProto(name="s", data_type=T.FLOAT, dims=[3])
    bad.raw_data = b"\0" * 8
    p = os.path.join(fc.WORK, "short.pb")
    open(p, "wb").write(bad.SerializeToString())
    expect_error(p, "raw_data")
    s = helper.make_tensor("s", T.STRING, [1], [b"x"])
    p = os.path.join(fc.WORK, "string.pb")
    open(p, "wb").write(s.SerializeToString())
    expect_error(p, "STRING")


fc.init()
test_npy()
test_npy_bad()
test_pb()
fc.finish()
