"""hetc train on the Hugging Face exports with other inputs than a symbolic
input_ids (tests/hf, tools/export_hf.py), against the torch trajectories
beside them (<family>_random.ref.npz: traj_loss, traj_grad_norm of 5 AdamW
steps with the hparams' settings):

  - optimum's signature (llama / gpt2 _random_maskinputs.onnx: input_ids,
    attention_mask, position_ids): hetc train binds the mask to ones and the
    positions to 0..T-1 (one log line each) and matches torch to 1e-4;
  - the static LLaMA (llama_random_static.onnx, fixed [2, 16]): trains at
    --microbatch 2 --seq 16 to the same trajectory, and any other batch is
    an error saying --microbatch 2.

    test_train_hf_inputs.py HETC SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

HETC, SRC = sys.argv[1], sys.argv[2]
HF = os.path.join(SRC, "tests", "hf")
sys.path.insert(0, HF)
import test_hf as hf  # noqa: E402  (the HF harness: one train command line for both)
RTOL = 1e-4
STEP = re.compile(r"step\s+\d+/\d+ \| loss (\S+) \| grad norm (\S+)")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def train(path, hp, batch=None):
    """hetc train with the reference's hyper-parameters (tests/hf/test_hf.py's
    command line), batch rows per step."""
    hp = dict(hp, batch=batch or hp["batch"])
    return subprocess.run(hf.train_cmd(HETC, path, hp), capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))


def trajectory(name, p, ref, hp):
    if not check(p.returncode == 0, f"{name}: hetc train exit {p.returncode}: "
                 + (p.stderr.strip().splitlines() or [""])[0][:300]):
        return
    got = np.array(STEP.findall(p.stdout), np.float64)
    if not check(got.shape == (hp["steps"], 2), f"{name}: {len(got)} step lines"):
        return
    e = max(float(np.max(np.abs(got[:, 0] - ref["traj_loss"]) / np.abs(ref["traj_loss"]))),
            float(np.max(np.abs(got[:, 1] - ref["traj_grad_norm"])
                         / np.abs(ref["traj_grad_norm"]))))
    check(e <= RTOL, f"{name}: loss and grad norm vs torch, max relative error {e:.2e}")


for family in ("llama", "gpt2"):
    ref = np.load(os.path.join(HF, f"{family}_random.ref.npz"))
    hp = json.loads(str(ref["hparams"]))
    name = hp["exports"]["maskinputs"]
    p = train(os.path.join(HF, name), hp)
    trajectory(name, p, ref, hp)
    bound = [l for l in p.stdout.splitlines() if l.startswith("hetc: input ")]
    check(len(bound) == 2 and "attention_mask" in bound[0] and "ones" in bound[0]
          and "position_ids" in bound[1] and "arange" in bound[1],
          f"{name}: one line per bound input: {bound}")

ref = np.load(os.path.join(HF, "llama_random.ref.npz"))
hp = json.loads(str(ref["hparams"]))
name = hp["exports"]["static"]
trajectory(name, train(os.path.join(HF, name), hp), ref, hp)
p = train(os.path.join(HF, name), hp, batch=4)
check(p.returncode == 1 and "fixed batch of %d" % hp["batch"] in p.stderr
      and "--microbatch %d" % hp["batch"] in p.stderr,
      f"{name} at --microbatch 4: says --microbatch {hp['batch']}: {p.stderr.strip()[:300]}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
