"""The committed test models and the embedded example are consistent and
reproducible, without torch:
  - onnxruntime run now on each committed model and input gives the committed
    logits (tools/make_references.py --check);
  - each <family>.json describes its .onnx files (opset, symbolic batch/seq
    input, logits shape) and its initializer map is true: every mapped ONNX
    initializer equals the named tensor of <family>.npz (transposed where
    the map says), and every float initializer of a weight-sized tensor is
    mapped;
  - examples/tiny_corpus.bin is a valid llm.c token file for a vocab-256 model.
usage: test_committed_models.py SOURCE_DIR"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


r = subprocess.run([sys.executable, os.path.join(SRC, "tools", "make_references.py"), "--check",
                    os.path.join(SRC, "tests", "models"), os.path.join(SRC, "examples")],
                   capture_output=True, text=True)
print(r.stdout + r.stderr)
check(r.returncode == 0, "make_references.py --check: committed logits reproduce in onnxruntime")

configs = sorted(glob.glob(os.path.join(SRC, "tests", "models", "*.json")) +
                 glob.glob(os.path.join(SRC, "examples", "*.json")))
n_models = 0
for cp in configs:
    with open(cp) as f:
        cfg = json.load(f)
    if "onnx" not in cfg:
        continue
    d = os.path.dirname(cp)
    npz = os.path.join(d, cfg["weights"]) if cfg.get("weights") else None
    W = np.load(npz) if npz else None
    for name in cfg["onnx"]:
        n_models += 1
        m = onnx.load(os.path.join(d, name))
        op = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
        check(op and op[0] in cfg["opsets"] and (len(cfg["opsets"]) == 1 or
                                                 name.endswith(f"_op{op[0]}.onnx")),
              f"{name}: opset {op} matches config {cfg['opsets']}")
        inp = {i.name: i for i in m.graph.input}
        out = {o.name: o for o in m.graph.output}
        ok = "input_ids" in inp and "logits" in out
        if ok:
            idims = [x.dim_param for x in inp["input_ids"].type.tensor_type.shape.dim]
            odims = [x.dim_param or x.dim_value for x in out["logits"].type.tensor_type.shape.dim]
            ok = idims == ["batch", "seq"] and odims == ["batch", "seq", cfg["vocab_size"]]
        check(ok, f"{name}: input_ids [batch, seq] -> logits [batch, seq, {cfg['vocab_size']}]")
        if W is None:
            continue
        imap = cfg["initializers"][name]
        bad, unmapped = [], []
        for t in m.graph.initializer:
            a = numpy_helper.to_array(t)
            if t.name not in imap:
                if a.dtype == np.float32 and a.size >= cfg["n_embd"]:
                    unmapped.append(t.name)
                continue
            e = imap[t.name]
            w = W[e["param"]]
            if not np.array_equal(w.T if e["transposed"] else w, a):
                bad.append(t.name)
        check(not bad and not unmapped and len(imap) > 0,
              f"{name}: {len(imap)} initializers equal their {os.path.basename(npz)} tensors"
              + (f" (differ: {bad[:3]}, unmapped: {unmapped[:3]})" if bad or unmapped else ""))
check(n_models >= 5, f"{n_models} committed models found (4 tests + example)")

corpus = os.path.join(SRC, "examples", "tiny_corpus.bin")
raw = np.fromfile(corpus, dtype=np.uint8)
head = raw[:1024].view(np.int32)
toks = raw[1024:].view(np.uint16)
check(head[0] == 20240520 and head[1] == 1 and head[2] == toks.size and toks.size > 10000 and
      int(toks.max()) < 256, f"tiny_corpus.bin: llm.c header, {toks.size} tokens < 256")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
