"""The host executor skips zeroing an output whose op entry marks it fully
overwritten by the kernel (HxOpEntry.overwrite, codegen/hostexec_ops.c).
A wrong mark would let a kernel read stale arena bytes.  With
HETC_HX_POISON=1 the executor fills every such output with 0xff bytes (NaN
in each float lane, -1 in integers) before its node runs; the losses and
gradient norms of a few training steps must equal those of the normal run
bit for bit (the oracle: the same executor with the outputs zeroed as the
kernels' contract says, whose results the other training tests check
against PyTorch).  Models: gpt_tiny (LayerNorm, GELU, attention, tied
embedding) and the LLaMA test model (RMSNorm, RoPE slices/concat, SiLU).

    test_train_poison.py HETC SOURCE_DIR
"""
import os
import re
import subprocess
import sys

HETC, SRC = sys.argv[1], sys.argv[2]
DATA = os.path.join(SRC, "examples/tiny_corpus.bin")
MODELS = {
    "gpt_tiny": (os.path.join(SRC, "examples/gpt_tiny.onnx"), []),
    "llama_op17": (os.path.join(SRC, "tests/models/llama_op17.onnx"),
                   ["--microbatch", "2", "--seq", "16"]),
}
STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+) \| grad norm (\S+)", re.M)


def run(model, extra, poison):
    env = dict(os.environ, HETC_HX_POISON="1" if poison else "0")
    r = subprocess.run([HETC, "train", model, "--precision", "fp32", "--data", DATA, "--steps", "3", "--no-checkpoint",
                        *extra], capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(f"FAIL: hetc train {model} (poison={poison}) exited {r.returncode}:\n"
                 f"{r.stdout}{r.stderr}")
    return STEP.findall(r.stdout)


fails = 0
for name, (model, extra) in MODELS.items():
    a, b = run(model, extra, False), run(model, extra, True)
    same = len(a) == 3 and a == b
    print(f"{name}: {'identical' if same else 'DIFFER'}: zeroed {a} / poisoned {b}")
    fails += not same
sys.exit(1 if fails else 0)
