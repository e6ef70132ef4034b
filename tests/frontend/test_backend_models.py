"""Import every ONNX backend node-test model shipped by Debian's
libonnx-testdata (valid models written by the ONNX project, the oracle).

A model must import (and verify) exactly when every node is an op the
importer claims at the model's opset and its tensors have dtypes hetc has;
otherwise it must fail with exit 1 naming the first offending node's op or
value.  No model may crash the importer.
"""
import glob
import os
import sys

import onnx

import fe_common as fc

DATA = "/usr/share/libonnx-testdata/data/node"
HETC_DTYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16}


def default_opset(m):
    vs = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    return vs[0] if vs else None


def expected_problem(m, claimed):
    """Why the importer should reject m (a string it must mention), or None."""
    g = m.graph

    def bad_type(vi):
        return (not vi.type.HasField("tensor_type") or
                vi.type.tensor_type.elem_type not in HETC_DTYPES)
    # same order as the importer: initializers, inputs, nodes, outputs
    for t in g.initializer:
        if t.data_type not in HETC_DTYPES:
            return t.name
    for vi in g.input:
        if bad_type(vi):
            return vi.name
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in claimed:
            return n.op_type
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type not in HETC_DTYPES:
                return n.op_type
            if n.op_type == "Cast" and a.name == "to" and a.i not in HETC_DTYPES:
                return n.op_type
    for vi in g.output:
        if bad_type(vi):
            return vi.name
    return None


def main():
    if not os.path.isdir(DATA):
        print("SKIP: %s not installed (Debian package libonnx-testdata)" % DATA)
        sys.exit(77)
    claimed = {}
    counts = {"ok": 0, "rejected": 0}
    for p in sorted(glob.glob(os.path.join(DATA, "*", "model.onnx"))):
        m = onnx.load(p, load_external_data=False)
        v = default_opset(m)
        if v is None:
            continue
        if v not in claimed:
            claimed[v] = set(fc.run(["--ops", str(v)])[1].split())
        why = expected_problem(m, claimed[v])
        rc, out = fc.run([p, "--allow-unbound"])
        name = p.split("/")[-2]
        if why is None:
            fc.check(rc == 0, "%s: should import: %s" % (name, out.strip()))
            counts["ok"] += 1
        else:
            first = out.splitlines()[0] if out else ""
            fc.check(rc == 1 and first.startswith("error: ") and why in first,
                     "%s: should be rejected naming %r: rc=%d %s" % (name, why, rc, first))
            counts["rejected"] += 1
    print(counts)
    fc.check(counts["ok"] > 300, "too few backend models imported: %s" % counts)


fc.init()
main()
fc.finish()
