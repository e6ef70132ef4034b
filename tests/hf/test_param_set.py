"""hetc's trainable tensors vs torch's named_parameters, on every export in
tests/hf (issue 14, "the parameter set is a decision hetc makes visibly").

For each tests/hf/*.onnx, `hetc import --list-params DIR` lists what hetc
trains (after the importer's buffer / untie rules and tie-weights) with the
values it starts from.  The oracle is the ref.npz beside the export
(param/<name> for every model.named_parameters() entry, ties once):

  - the same count;
  - a one-to-one matching of torch parameters to hetc tensors by value:
    equal tensors are interchangeable (fresh weights: all norm weights are
    ones), so tensors are compared as a multiset keyed by (shape, bytes),
    2-D ones up to a transpose (exporters store Linear weights transposed).
    Gemma's exporters fold its norms' (1 + w) into the initializer, so for
    gemma a 1-D torch parameter w also matches a hetc tensor holding
    float32(1 + w): training 1 + w with AdamW is training w (same gradient,
    no weight decay on 1-D tensors).

An export hetc cannot import is a failure (reported with hetc's message),
not a skip.

    test_param_set.py HETC WORKDIR [EXPORT-GLOB]
"""
import glob
import json
import os
import subprocess
import sys

import numpy as np

HF = os.path.dirname(os.path.abspath(__file__))


def ref_of(onnx_name):
    stem = onnx_name[:-5]
    for suffix in ("_torchscript", "_dynamo", "_optimum", "_static", "_dynstatic",
                   "_maskinputs"):
        if stem.endswith(suffix):
            return os.path.join(HF, stem[: -len(suffix)] + ".ref.npz")
    raise ValueError("no reference for " + onnx_name)


def listed(hetc, path, work):
    p = subprocess.run([hetc, "import", path, "--batch", "2", "--seq", "16", "--list-params",
                        work], capture_output=True, text=True, timeout=600)
    if p.returncode:
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        return None, (lines[-1] if lines else "exit %d" % p.returncode)[:300]
    out = {}
    for line in open(os.path.join(work, "params.txt")):
        f = line.split()
        if f and f[0] == "trainable":
            out[f[1]] = np.load(os.path.join(work, f[2]))
    return out, None


def key(a):
    a = np.ascontiguousarray(np.asarray(a, np.float32))
    if a.ndim == 2 and (a.shape[0], a.tobytes()) > (a.shape[1], a.T.copy().tobytes()):
        a = np.ascontiguousarray(a.T)  # a transposed copy is the same tensor
    return a.shape, a.tobytes()


def compare(mine, torch_p, family):
    """(missing, extra): torch parameters no hetc tensor holds, hetc tensors
    no torch parameter matches (a one-to-one matching by value)."""
    pool = {}
    for n, a in mine.items():
        pool.setdefault(key(a), []).append(n)
    missing = []
    for n, a in sorted(torch_p.items()):
        keys = [key(a)]
        if family == "gemma" and a.ndim == 1:
            keys.append(key(np.float32(1) + a.astype(np.float32)))
        k = next((k for k in keys if pool.get(k)), None)
        if k is None:
            missing.append(n)
        else:
            pool[k].pop()
    return missing, [n for ns in pool.values() for n in ns]


def dropped_by_exporter(name, missing, torch_p):
    """The dynamo exporter's optimizer removes what it proves constant in a
    fresh model: an Add of a zero bias (Gemm loses C), a second LayerNorm
    equal to the first (gpt_neox's parallel residual).  Those parameters are
    not in the file, so no importer can train them.  True when every missing
    parameter is such a constant tensor (all elements equal) of a dynamo
    export: anything else hetc lost is a failure."""
    return bool(missing) and "_dynamo" in name and all(
        np.all(torch_p[n] == torch_p[n].flat[0]) for n in missing)


def match(mine, torch_p, family, name=""):
    """None when the sets agree, else what differs.  With the export's name,
    parameters its exporter dropped (dropped_by_exporter) are not counted."""
    missing, extra = compare(mine, torch_p, family)
    if not extra and dropped_by_exporter(name, missing, torch_p):
        return None
    msg = []
    if len(mine) != len(torch_p):
        msg.append("%d trainable tensors, torch has %d" % (len(mine), len(torch_p)))
    if missing:
        msg.append("no hetc tensor holds torch's %s" % ", ".join(missing[:3]))
    if extra:
        msg.append("hetc trains %s that torch does not" % ", ".join(extra[:3]))
    return "; ".join(msg) or None


def main():
    hetc, work = sys.argv[1], sys.argv[2]
    pat = sys.argv[3] if len(sys.argv) > 3 else "*.onnx"
    files = sorted(glob.glob(os.path.join(HF, pat)))
    if not files:
        print("no export matches %s" % pat)
        sys.exit(1)
    fails = 0
    print("%-34s %6s %6s  %s" % ("export", "torch", "hetc", "match"))
    for path in files:
        name = os.path.basename(path)
        ref = np.load(ref_of(name))
        hp = json.loads(str(ref["hparams"]))
        torch_p = {k[6:]: ref[k] for k in ref.files if k.startswith("param/")}
        d = os.path.join(work, name[:-5])
        mine, err = listed(hetc, path, d)
        if err is None:
            err = match(mine, torch_p, hp["family"], name)
        fails += err is not None
        ok = "yes"
        if err is None and len(mine) != len(torch_p):
            ok = "yes, but the exporter dropped %d constant tensors" % (len(torch_p) - len(mine))
        print("%-34s %6d %6s  %s" % (name, len(torch_p), "-" if mine is None else len(mine),
                                     ok if err is None else "no: " + err), flush=True)
    print("%d of %d exports: hetc trains exactly torch's parameters" %
          (len(files) - fails, len(files)))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
