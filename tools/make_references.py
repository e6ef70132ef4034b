#!/usr/bin/env python3
"""Reference inputs/outputs for the committed models, from onnxruntime.

For every <stem>.onnx in tests/models (and examples/gpt_tiny.onnx) that has a
<family>.json config next to it:
  <stem>.input_ids.npy   int64 [batch, seq], numpy RNG with a fixed seed
  <stem>.logits.npy      float32 [batch, seq, vocab], onnxruntime (CPU)
and, unless --no-torch, the same input through the torch model the file was
exported from (tools/export_test_models.py, weights from <family>.npz) must
agree with onnxruntime to 1e-5 (max |diff| / max |ref|), else this fails.

    python3 tools/make_references.py           # write (needs torch for the cross-check)
    python3 tools/make_references.py --check   # re-run onnxruntime on the committed
                                               # models, compare with the committed
                                               # logits (no torch; what ctest runs)
"""
import argparse
import glob
import importlib.util
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = [os.path.join(ROOT, "tests", "models"), os.path.join(ROOT, "examples")]
INPUT_SEED = 20240520
TOL = 1e-5


def configs(dirs):
    """(onnx path, stem, config) for every model file a config names."""
    out = []
    for d in dirs:
        for cp in sorted(glob.glob(os.path.join(d, "*.json"))):
            with open(cp) as f:
                try:
                    cfg = json.load(f)
                except json.JSONDecodeError:
                    continue
            if not isinstance(cfg, dict) or "onnx" not in cfg:
                continue
            for name in cfg["onnx"]:
                out.append((os.path.join(d, name), name[:-5], cfg, cp[:-5]))
    return out


def ort_logits(path, ids):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # deterministic reductions
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids})[0]


def rel_err(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def load_exporter():
    p = os.path.join(ROOT, "tools", "export_test_models.py")
    spec = importlib.util.spec_from_file_location("export_test_models", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_logits(mod, cfg, weights_path, ids):
    import torch
    model = mod.build_model(cfg).eval()  # seeded init: the weights when no .npz
    if os.path.exists(weights_path):
        w = np.load(weights_path)
        model.load_state_dict({k: torch.from_numpy(np.array(w[k])) for k in model.state_dict()},
                              strict=True)
    with torch.no_grad():
        return model(torch.from_numpy(ids)).numpy()


def write(args):
    mod = None if args.no_torch else load_exporter()
    failed = False
    for path, stem, cfg, base in configs(args.dirs):
        rng = np.random.default_rng(INPUT_SEED)
        ids = rng.integers(0, cfg["vocab_size"], size=(cfg["batch"], cfg["seq"])).astype(np.int64)
        logits = ort_logits(path, ids)
        d = os.path.dirname(path)
        np.save(os.path.join(d, stem + ".input_ids.npy"), ids)
        np.save(os.path.join(d, stem + ".logits.npy"), logits.astype(np.float32))
        msg = f"{path}: logits {logits.shape}"
        if mod is not None:
            ref = torch_logits(mod, cfg, base + ".npz", ids)
            e = rel_err(logits, ref)
            msg += f", onnxruntime vs torch max|diff|/max|ref| = {e:.2e}"
            if not (e <= TOL) or logits.shape != ref.shape:
                msg += f"  FAIL (> {TOL})"
                failed = True
        print(msg)
    if failed:
        sys.exit("make_references: onnxruntime and torch disagree; the export is wrong")


def check(args):
    ran, failed = 0, []
    for path, stem, cfg, base in configs(args.dirs):
        d = os.path.dirname(path)
        ip, lp = os.path.join(d, stem + ".input_ids.npy"), os.path.join(d, stem + ".logits.npy")
        if not (os.path.exists(ip) and os.path.exists(lp)):
            failed.append(stem)
            print(f"FAIL {stem}: missing {ip} or {lp}")
            continue
        ids, ref = np.load(ip), np.load(lp)
        ok = ids.dtype == np.int64 and ids.shape == (cfg["batch"], cfg["seq"])
        got = ort_logits(path, ids)
        ok = ok and got.shape == ref.shape == (cfg["batch"], cfg["seq"], cfg["vocab_size"])
        e = rel_err(got, ref) if got.shape == ref.shape else float("inf")
        ok = ok and e <= TOL and np.isfinite(got).all()
        ran += 1
        print(f"{'ok  ' if ok else 'FAIL'} {stem}: {got.shape}, max|diff|/max|ref| = {e:.2e}")
        if not ok:
            failed.append(stem)
    if ran == 0:
        sys.exit("make_references --check: no models found")
    print(f"{ran - len(failed)} of {ran} reproduce")
    sys.exit(1 if failed else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="verify the committed references")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch cross-check")
    ap.add_argument("dirs", nargs="*", default=DIRS)
    args = ap.parse_args()
    (check if args.check else write)(args)


if __name__ == "__main__":
    main()
