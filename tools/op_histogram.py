#!/usr/bin/env python3
"""Op histogram of ONNX models (node counts by op_type), as a markdown table.

    python3 tools/op_histogram.py tests/models/*.onnx examples/gpt_tiny.onnx
    python3 tools/op_histogram.py --no-weights /tmp/gpt39b/model.onnx   # external data not read
"""
import argparse
import os
from collections import Counter

import onnx


def histogram(path):
    m = onnx.load(path, load_external_data=False)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return Counter(n.op_type for n in m.graph.node), opset, len(m.graph.initializer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--no-weights", action="store_true", help="(always: external data is not read)")
    a = ap.parse_args()
    hs = [(os.path.basename(p), *histogram(p)) for p in a.models]
    ops = sorted(set().union(*(h[1] for h in hs)))
    print("| op | " + " | ".join(f"{n} (opset {o})" for n, _, o, _ in hs) + " |")
    print("| --- |" + " ---: |" * len(hs))
    for op in ops:
        print(f"| {op} | " + " | ".join(str(h[1].get(op, "")) for h in hs) + " |")
    print("| **nodes** | " + " | ".join(f"**{sum(h[1].values())}**" for h in hs) + " |")
    print("| initializers | " + " | ".join(str(h[3]) for h in hs) + " |")


if __name__ == "__main__":
    main()
