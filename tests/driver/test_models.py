"""hetc run on every committed export in tests/models and on the embedded
example, against onnxruntime run now on the same inputs (the oracle), to
1e-4 relative.  usage: test_models.py HETC SOURCE_DIR"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

HETC, SRC = sys.argv[1], sys.argv[2]
models = sorted(glob.glob(os.path.join(SRC, "tests", "models", "*.onnx")))
models += [os.path.join(SRC, "examples", "gpt_tiny.onnx")]
failures, ran = [], 0
for m in models:
    ids = m[:-5] + ".input_ids.npy"
    if not (os.path.exists(m) and os.path.exists(ids)):
        continue
    ran += 1
    name = os.path.basename(m)
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([HETC, "run", m, "--input", "input_ids=" + ids, "--output-dir", d],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            failures.append(name)
            print(f"FAIL {name}: hetc run exited {p.returncode}\n{p.stderr}")
            continue
        got = np.load(os.path.join(d, "logits.npy"))
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": np.load(ids)})[0]
    ok = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    err = np.abs(got - ref).max() / np.abs(ref).max() if got.shape == ref.shape else float("inf")
    print(f"{'ok  ' if ok else 'FAIL'} {name}: logits {got.shape}, max|diff|/max|ref| = {err:.2e}")
    if not ok:
        failures.append(name)
if ran == 0:
    print("FAIL: no models found")
    sys.exit(1)
print(f"{ran - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
