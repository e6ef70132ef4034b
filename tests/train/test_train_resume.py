"""hetc train --engine executor --resume: continue from the newest
checkpoint in --checkpoint-dir (weights, optimizer state and the step
count), in the executor's own checkpoint format (step-NNNNNN/ with a
MANIFEST of raw fp32 files).  The compiled engine (the default) resumes
from the stage binaries' layer-wise checkpoints: test_train_compiled.py and
tests/stages check that.

Oracle: the uninterrupted run.  gpt_tiny, 12 steps of 2 microbatches, a
cosine schedule with warm-up, checkpoints every 6 steps; a copy of the
checkpoint directory without step 12, resumed to step 12, must

  - print steps 7-12 (loss, grad norm, lr) as the uninterrupted run did,
  - write a step-12 checkpoint whose MANIFEST checksums equal the
    uninterrupted run's (every weight, m and v bit for bit),
  - leave metrics.jsonl with one line per step 1-12 (the resumed steps
    replace what followed step 6);

for AdamW in fp32 and in bf16-mixed, and for SGD with momentum (one state
buffer).  Refused, with exit 1 and the reason named: an empty checkpoint
directory, another model's checkpoint (the parameter named), an AdamW run
resumed from an SGD checkpoint (its missing state named), a damaged file
(its checksum named).  A checkpoint already at --steps trains nothing.

usage: test_train_resume.py HETC SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

hetc, src = sys.argv[1], sys.argv[2]
MODEL = os.path.join(src, "examples", "gpt_tiny.onnx")
OTHER = os.path.join(src, "tests", "models", "llama_op17.onnx")
DATA = os.path.join(src, "examples", "tiny_corpus.bin")
BASE = ["--steps", "12", "--microbatch", "2", "--seq", "32", "--accum", "2",
        "--checkpoint-every", "6", "--lr-schedule", "cosine", "--warmup", "2"]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg, flush=True)
    return cond


def train(ckpt, *extra, model=MODEL, base=BASE):
    return subprocess.run([hetc, "train", model, "--engine", "executor", "--data", DATA, *base,
                           "--checkpoint-dir", ckpt, *extra], capture_output=True, text=True,
                          timeout=600)


def steps(text):
    """step -> 'loss | grad norm | lr' text"""
    return {int(m.group(1)): m.group(2) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| (loss \S+ \| grad norm \S+ \| lr \S+)", text, re.M)}


def sums(stepdir):
    return sorted(" ".join(l.split()[:5]) for l in open(os.path.join(stepdir, "MANIFEST"))
                  if not l.startswith("step "))


work = tempfile.mkdtemp(prefix="hetc_resume_")
try:
    for label, extra in (("adamw fp32", ["--precision", "fp32"]),
                         ("adamw bf16-mixed", ["--precision", "bf16-mixed"]),
                         ("sgd momentum", ["--precision", "fp32", "--optimizer", "sgd", "--lr",
                                           "0.05"])):
        tag = label.replace(" ", "_")
        full, part = os.path.join(work, tag), os.path.join(work, tag + "_resumed")
        p = train(full, *extra)
        if not check(p.returncode == 0, f"{label}: hetc train exit {p.returncode}: {p.stderr[-300:]}"):
            continue
        shutil.copytree(full, part)
        shutil.rmtree(os.path.join(part, "step-000012"))
        r = train(part, *extra, "--resume")
        if not check(r.returncode == 0, f"{label}: --resume exit {r.returncode}: {r.stderr[-300:]}"):
            continue
        want = {k: v for k, v in steps(p.stdout).items() if k > 6}
        got = steps(r.stdout)
        check(len(want) == 6 and got == want, f"{label}: resumed steps {got} != {want}")
        check("resumed from" in r.stdout and "step-000006" in r.stdout,
              f"{label}: no 'resumed from ...step-000006' line")
        same = sums(os.path.join(full, "step-000012")) == sums(os.path.join(part, "step-000012"))
        check(same, f"{label}: the resumed run's step-12 checkpoint differs from the "
                    "uninterrupted run's")
        met = [json.loads(l) for l in open(os.path.join(part, "metrics.jsonl"))]
        check([m.get("step") for m in met] == list(range(1, 13)),
              f"{label}: metrics.jsonl steps {[m.get('step') for m in met]}")
        print(f"{label}: steps 7-12 and the step-12 checkpoint equal the uninterrupted run's",
              flush=True)

    adam = os.path.join(work, "adamw_fp32")
    # already at --steps: nothing to do, exit 0, the checkpoint untouched
    r = train(adam, "--resume")
    check(r.returncode == 0 and "nothing to train" in r.stdout and not steps(r.stdout),
          f"resume at step 12 of 12: exit {r.returncode}: {r.stdout[-200:]} {r.stderr[-200:]}")
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    r = train(empty, "--resume")
    check(r.returncode == 1 and "no checkpoint in" in r.stderr and empty in r.stderr,
          f"--resume of an empty directory: exit {r.returncode}: {r.stderr[-300:]}")
    # another model's checkpoint
    other = os.path.join(work, "other")
    shutil.copytree(adam, other)
    r = train(other, "--resume", model=OTHER,
              base=["--steps", "20", "--microbatch", "2", "--seq", "16"])
    check(r.returncode == 1 and re.search(r"parameter '[^']+' is not a trained parameter", r.stderr),
          f"another model's checkpoint: exit {r.returncode}: {r.stderr[-300:]}")
    # AdamW from SGD's checkpoint (no v)
    sgd = os.path.join(work, "sgd_momentum_resumed")
    r = train(sgd, "--resume", base=BASE[:1] + ["20"] + BASE[2:])
    check(r.returncode == 1 and re.search(r"no 'v' state of parameter", r.stderr),
          f"adamw from an sgd checkpoint: exit {r.returncode}: {r.stderr[-300:]}")
    # a damaged weight file: one byte flipped
    bad = os.path.join(work, "damaged")
    shutil.copytree(adam, bad)
    f0 = open(os.path.join(bad, "step-000012", "MANIFEST")).read().split()[0]
    with open(os.path.join(bad, "step-000012", f0), "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 0x40]))
    r = train(bad, "--resume", base=BASE[:1] + ["20"] + BASE[2:])
    check(r.returncode == 1 and "checksum" in r.stderr and f0 in r.stderr,
          f"a damaged checkpoint: exit {r.returncode}: {r.stderr[-300:]}")
finally:
    shutil.rmtree(work, ignore_errors=True)
print("FAILED" if failures else "ok", flush=True)
sys.exit(1 if failures else 0)
