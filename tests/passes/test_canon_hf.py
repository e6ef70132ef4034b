"""canonicalize on real Hugging Face exports (tests/hf): every layer's
attention must become one Attention node (one per layer of the reference's
config), except BLOOM whose ALiBi bias the IR's Attention cannot carry (it
stays primitive, see passes/README.md), and `hetc run` must still reproduce the torch logits of
tests/hf/<family>_<init>.ref.npz to 1e-4 relative (max|diff| / max|ref|):
an oracle independent of hetc and of onnxruntime.

usage: test_canon_hf.py HETC SOURCE_DIR"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

RTOL = 1e-4
# Families whose attention stays primitive ops, and why (passes/README.md).
PRIMITIVE = {"bloom": "ALiBi: an additive per-head bias the Attention op has no input for"}


def family_of(name):
    """bloom_random_dynamo -> (bloom, random); gpt_neox_fresh_torchscript too."""
    m = re.match(r"(.+)_(fresh|random)_(dynamo|torchscript|optimum|maskinputs|static|dynstatic)$", name)
    return m.group(1), m.group(2)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                        r.stderr))
    return r


def canon_ops(hetc, model, binds, d):
    run([hetc, "import", model, "--batch", "2", "--seq", "16", *binds,
         "--dump-ir-after=canonicalize", "-o", d])
    dumps = glob.glob(os.path.join(d, "ir", "*-canonicalize.ir"))
    assert len(dumps) == 1, "no canonicalize dump in %s" % d
    text = open(dumps[0]).read()
    return {op: len(re.findall(r"= %s\(" % op, text)) for op in ("Attention", "Softmax", "IsNaN")}


def logits_error(hetc, model, binds, ref, d):
    ids = os.path.join(d, "input_ids.npy")
    np.save(ids, ref["input_ids"].astype(np.int64))
    out = os.path.join(d, "out")
    run([hetc, "run", model, "--input", "input_ids=" + ids, *binds, "--output-dir", out])
    got = np.load(os.path.join(out, "logits.npy")).astype(np.float64)
    want = ref["logits"].astype(np.float64)
    assert got.shape == want.shape, "logits shape %s, torch %s" % (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def check(hetc, src, name):
    fam, init = family_of(name)
    ref = np.load(os.path.join(src, "tests", "hf", "%s_%s.ref.npz" % (fam, init)))
    model = os.path.join(src, "tests", "hf", name + ".onnx")
    # optimum's signature (its own exports and the TorchScript imitation):
    # the driver binds attention_mask / position_ids to constants (ones /
    # arange, docs/TRAINING.md), after which the folded mask must be proven
    # causal like the exporters' own (optimum declares no position_ids
    # for BLOOM and Gemma: only the inputs the file has are bound)
    binds = []
    if name.endswith(("_maskinputs", "_optimum")):
        import onnx
        have = {i.name for i in onnx.load(model, load_external_data=False).graph.input}
        for inp, how in (("attention_mask", "ones"), ("position_ids", "arange")):
            if inp in have:
                binds += ["--bind-input", "%s=%s" % (inp, how)]
    with tempfile.TemporaryDirectory() as d:
        ops = canon_ops(hetc, model, binds, d)
        n = ops["Attention"]
        err = logits_error(hetc, model, binds, ref, d)
        if binds:  # a mask that is a run-time input proves nothing: no Attention
            unbound = canon_ops(hetc, model, [], os.path.join(d, "unbound"))["Attention"]
            assert unbound == 0, "%s: %d Attention nodes with attention_mask unbound" % (
                name, unbound)
    cfg = json.loads(str(ref["hparams"]))["config"]
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    assert layers, "%s: no layer count in the reference's config" % name
    want = 0 if fam in PRIMITIVE else layers
    print("     %-34s Attention %d  logits max|diff|/max|ref| %.2e" % (name, n, err))
    assert n == want, "%s: %d Attention nodes after canonicalize, expected %d%s" % (
        name, n, want, " (%s)" % PRIMITIVE[fam] if fam in PRIMITIVE else "")
    if want:  # every Softmax and SDPA NaN guard went into an Attention
        assert ops["Softmax"] == 0 and ops["IsNaN"] == 0, "%s: left after canonicalize: %s" % (
            name, ops)
    assert err <= RTOL, "%s: logits differ from torch by %.3g relative" % (name, err)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    hetc, src = argv[1], argv[2]
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(src, "tests", "hf",
                                                                             "*.onnx")))
    only = os.environ.get("PASSES_ONLY")
    passed = failed = 0
    for name in names:
        if only and only not in name:
            continue
        try:
            check(hetc, src, name)
            passed += 1
            print("ok   %s" % name)
        except Exception as e:  # report every export, keep going
            failed += 1
            print("FAIL %s: %s" % (name, e))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
