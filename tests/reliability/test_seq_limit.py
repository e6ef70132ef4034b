"""--seq beyond the model's positions (issue 16 item 14): hetc named a Where
that did not broadcast (gpt_tiny's 64x64 causal-mask buffer), an index out of
range at step 1 (Hugging Face gpt2 / OPT learned positions) or while folding
a constant (GPT-J's rotary table).  Now every one says that --seq exceeds
the model's maximum positions P and names the tensor.  Oracles for P: the
ONNX file's initializers (onnx) for gpt_tiny, the transformers config in
tests/hf/<family>_random.ref.npz for the Hugging Face exports.

usage: test_seq_limit.py HETC SOURCE_DIR
"""
import json
import os
import sys

import numpy as np
import onnx

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
HF = os.path.join(SRC, "tests", "hf")


def expect_limit(model, P, table, cmd="import"):
    seq = 2 * P
    if cmd == "import":
        args = [HETC, "import", model, "--batch", "1", "--seq", str(seq)]
    else:
        args = [HETC, "train", model, "--data", os.path.join(SRC, "examples", "tiny_corpus.bin"),
                "--seq", str(seq), "--steps", "1", "--microbatch", "1", "--no-checkpoint"]
    p = rc.run(args, timeout=300)
    want = "--seq %d exceeds the model's maximum positions %d" % (seq, P)
    rc.check(p.returncode != 0 and want in p.stderr and table in p.stderr,
             "hetc %s %s --seq %d: expected %r naming %r, got rc=%d %s" %
             (cmd, os.path.basename(model), seq, want, table, p.returncode, p.stderr[-600:]))
    # at the limit it imports
    q = rc.run([HETC, "import", model, "--batch", "1", "--seq", str(P)], timeout=300)
    rc.check(q.returncode == 0, "hetc import %s --seq %d (the limit) failed: %s"
             % (os.path.basename(model), P, q.stderr[-600:]))


# gpt_tiny: the position table's rows, from the ONNX initializers
tiny = os.path.join(SRC, "examples", "gpt_tiny.onnx")
inits = {i.name: list(i.dims) for i in onnx.load(tiny).graph.initializer}
wpe = [n for n in inits if "wpe" in n]
if rc.check(len(wpe) == 1, "gpt_tiny has no single wpe initializer: %s" % sorted(inits)):
    for cmd in ("import", "train"):
        expect_limit(tiny, inits[wpe[0]][0], wpe[0], cmd)

# Hugging Face exports with position tables: learned (gpt2, OPT) and a
# rotary table folded as a constant (GPT-J)
for fam, key, table in (("gpt2", "n_positions", "wpe"), ("opt", "max_position_embeddings",
                                                         "embed_positions"),
                        ("gptj", "n_positions", "")):
    hp = json.loads(str(np.load(os.path.join(HF, fam + "_random.ref.npz"))["hparams"]))
    for exp in ("torchscript", "dynamo"):
        expect_limit(os.path.join(HF, "%s_random_%s.onnx" % (fam, exp)), hp["config"][key], table)
rc.finish()
