"""Tensor parallelism in stage binaries (issue 9).

The example GPT (examples/gpt_tiny.onnx) on examples/clusters/tiny_pair.yaml
with a hand-edited plan.json (hetc compile --plan FILE): stage 0 (layers
1-9: embedding and two transformer blocks) runs TP = 2, stage 1 (layers
10-18: two blocks, the head and the loss, sharing the tied embedding with
stage 0) runs DP = 2 x TP = 2, so 6 ranks.  Oracle: `hetc train`, the
single-process trainer, on the same data order and microbatching: 20
steps' losses equal to 1e-5 relative.  Then the TP run's final checkpoint
(stored unsharded) resumes under the planner's TP = 1 plan and under the
TP plan itself: step 21's loss equals hetc train's to 1e-5.

usage: test_stages_tp.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

HETC, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(SRC, "examples", "clusters", "tiny_pair.yaml")
SEQ, MB, GB, STEPS = 64, 4, 16, 20
# the cosine schedule decays over --steps: compile and train use STEPS + 1
OPT = ["--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(cmd, **kw):
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n", flush=True)
    return p


def losses(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M)}


def worst_rel(got, ref):
    w = 0.0
    for k, v in got.items():
        r = ref.get(k, float("nan"))
        rel = abs(v - r) / max(abs(r), 1e-30)
        w = max(w, rel if rel == rel else 1.0)
    return w


def compile_to(out, *extra):
    return run([HETC, MODEL, CLUSTER, "--seq", str(SEQ), "--microbatch", str(MB),
                "--global-batch", str(GB), "--threads", "2", "--steps", str(STEPS + 1), *OPT,
                *extra, "-o", out], timeout=600)


def config_lines(binary, kind):
    """The stage config records of one kind, from the binary's strings."""
    data = open(binary, "rb").read()
    return [m.decode() for m in re.findall(rb"(?m)^" + kind.encode() + rb" [^\n\x00]*", data)]


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# the planner's plan (TP = 1 everywhere: hetc compile plans without TP unless --max-tp)
out1 = os.path.join(WORK, "build_tp1")
p = compile_to(out1)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out1, "plan.json")))
check(all(s["tp"] == 1 for s in plan["stages"]), "hetc compile planned TP without --max-tp")

# hand-edited: two stages, TP = 2 and DP 2 x TP 2
q = json.loads(json.dumps(plan))
check(len(q["stages"]) == 2, f"tiny_pair plan has {len(q['stages'])} stages (want 2)")
s0, s1 = q["stages"][0], q["stages"][1]
s0.update(layers=[1, 9], dp=1, tp=2, warmup=2)
s1.update(layers=[10, 18], dp=2, tp=2, warmup=1)
q["stages"] = [s0, s1]
plan_path = os.path.join(WORK, "plan_tp.json")
json.dump(q, open(plan_path, "w"), indent=1)
out2 = os.path.join(WORK, "build_tp2")
p = compile_to(out2, "--plan", plan_path)
if not check(p.returncode == 0, f"hetc compile --plan (TP 2) exit {p.returncode}"):
    sys.exit(1)
launch_text = open(os.path.join(out2, "launch.sh")).read()
check("stages=(2 4)" in launch_text, "launch.sh should run 2 and 4 ranks (dp x tp)")
for k in range(2):
    b = os.path.join(out2, f"stage_{k}")
    tp = config_lines(b, "tp")
    shards = config_lines(b, "tpshard")
    check(any(t.split()[1 + k] == "2" for t in tp), f"stage_{k}: no 'tp' record giving it TP 2: {tp}")
    # two blocks per stage: attention (qkv weight + bias, out weight) and MLP
    # (fc weight + bias, proj weight) sharded in each
    check(len(shards) == 12, f"stage_{k}: {len(shards)} tpshard records (want 12)")

ref = run([HETC, "train", MODEL, "--data", DATA, "--steps", str(STEPS + 1), "--microbatch", str(MB),
           "--accum", str(GB // MB), "--seq", str(SEQ), *OPT, "--no-checkpoint"], timeout=900)
check(ref.returncode == 0, "hetc train failed")
ref_l = losses(ref.stdout)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = os.path.join(WORK, "ckpt")
p = run([os.path.join(out2, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
         "--checkpoint-dir", ck], timeout=900)
check(p.returncode == 0, f"TP launch.sh exit {p.returncode}")
tp_l = losses(p.stdout)
check(len(tp_l) == STEPS, f"{len(tp_l)} loss lines of {STEPS}")
w = worst_rel(tp_l, ref_l)
check(w <= 1e-5, f"TP 2 run vs hetc train: max relative difference {w:.3g} > 1e-5")
print(f"TP 2 run: {len(tp_l)} steps == hetc train to {w:.2g} relative "
      f"(step 1 {tp_l.get(1)}, step {STEPS} {tp_l.get(STEPS)})", flush=True)
check(tp_l.get(STEPS, 99) < tp_l.get(1, 0), "loss is not falling")

# the checkpoint is unsharded: it resumes under TP = 1 and under TP = 2
for name, out in (("TP 1", out1), ("TP 2", out2)):
    ck2 = os.path.join(WORK, "ckpt_" + name.replace(" ", ""))
    shutil.copytree(ck, ck2)
    p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(STEPS + 1),
             "--checkpoint-dir", ck2, "--resume"], timeout=900)
    check(p.returncode == 0, f"resume under {name} exit {p.returncode}")
    more = losses(p.stdout)
    check(sorted(more) == [STEPS + 1], f"resume under {name}: steps {sorted(more)}")
    w2 = worst_rel(more, ref_l)
    check(w2 <= 1e-5, f"resume under {name}: step {STEPS + 1} {more} vs hetc train "
                      f"{ref_l.get(STEPS + 1)}: {w2:.3g} > 1e-5")
    print(f"resumed under {name}: step {STEPS + 1} loss {more.get(STEPS + 1)} == hetc train "
          f"to {w2:.2g}", flush=True)

print("FAILED" if failures else "OK", len(failures), "failures")
sys.exit(1 if failures else 0)
