"""Shared pieces of the CUDA backend's Python tests (tests/cuda/test_cuda_*.py).

Each test compiles examples/gpt_tiny.onnx (on examples/clusters/
tiny_hetero.yaml unless it names another cluster) and checks what comes
out; this module holds what they all repeat: the example paths, the
failure bookkeeping (check / finish), running a command with its output's
tail on failure, the loss lines a run prints and the GPU count.  run()
gives a hetc train / compile --precision fp32 unless it names one
(tests/hetc_cmd.py): the host oracle's fp32, what the CUDA stage binaries
have run on a GPU.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")  # dtype fp16
# the optimizer of the tests that train (compile and hetc train alike)
OPT = ["--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(cmd, timeout=900, env=None, tail=3000, pin="fp32"):
    """Runs cmd, printing it, and the tails of its output when it fails.
    None when it ran past timeout (a hang: a failure of the test).  A hetc
    command runs at --precision `pin` unless it names one (None: hetc's
    default)."""
    if os.path.basename(cmd[0]) == "hetc":
        cmd = pinned(cmd, pin)
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        check(False, f"timed out after {timeout} s (a hang): {' '.join(cmd)}")
        return None
    if p.returncode:
        print(p.stdout[-tail:], p.stderr[-tail:], sep="\n", flush=True)
    return p


def fresh(work):
    """work emptied (a rerun starts clean)"""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)


def losses(text):
    """step -> loss from a run's `step N/M | loss X` lines"""
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M)}


def gpu_count():
    """GPUs nvidia-smi -L lists; None without nvidia-smi or with none"""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return len([l for l in p.stdout.splitlines() if l.startswith("GPU ")]) or None


def finish(*ok, failed="check(s) failed"):
    """Exit 1 after `N <failed>` when a check failed, else print ok (default
    "ok") and exit 0."""
    if failures:
        print(f"{len(failures)} {failed}")
        sys.exit(1)
    print(*(ok or ("ok",)))
    sys.exit(0)
