"""Deeply nested ONNX models written as raw protobuf bytes (onnx's own Python
protobuf refuses to build or serialize them past its recursion limit).

  python3 deep_nesting.py OUT.onnx [N]   writes if_nested(N, lean=True)
                                         (default N 3000: the fuzz corpus file)

Field numbers are onnx.proto's: ModelProto{ir_version=1, opset_import=8,
graph=7}, OperatorSetIdProto{version=2}, GraphProto{node=1, name=2, input=11},
NodeProto{input=1, output=2, op_type=4, attribute=5},
AttributeProto{name=1, g=6, type=20 (GRAPH=5)}, ValueInfoProto{name=1, type=2},
TypeProto{tensor_type=1, sequence_type=4}, TypeProto.Sequence{elem_type=1}.
"""
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):
    """length-delimited field"""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vfield(field, n):
    return varint(field << 3) + varint(n)


def model(graph):
    return vfield(1, 8) + ld(8, vfield(2, 17)) + ld(7, graph)


def if_nested(n, lean=False):
    """A main graph whose If node's then_branch holds an If node whose
    then_branch ... n If nodes, so n + 1 GraphProto levels.  lean: only the
    fields that nest (the fuzz corpus copy: libFuzzer's -max_len follows the
    largest seed)."""
    g = b"" if lean else ld(2, b"g%d" % n)
    for k in range(n - 1, -1, -1):  # inside out
        if lean:
            g = ld(1, ld(5, ld(6, g)))
            continue
        attr = ld(1, b"then_branch") + vfield(20, 5) + ld(6, g)
        node = ld(1, b"c") + ld(2, b"y%d" % k) + ld(4, b"If") + ld(5, attr)
        g = ld(1, node) + ld(2, b"g%d" % k)
    return model(g)


def sequence_nested(n):
    """One graph input typed sequence(sequence(...(tensor))) n deep: no
    subgraph at all, only TypeProto nesting."""
    t = ld(1, vfield(1, 1))  # tensor_type{elem_type=FLOAT}
    for _ in range(n):
        t = ld(4, ld(1, t))
    return model(ld(11, ld(1, b"x") + ld(2, t)) + ld(2, b"g"))


if __name__ == "__main__":
    with open(sys.argv[1], "wb") as f:
        f.write(if_nested(int(sys.argv[2]) if len(sys.argv) > 2 else 3000, lean=True))
