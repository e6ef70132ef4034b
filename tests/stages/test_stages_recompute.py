"""Activation recompute in stage binaries, end to end (issue 9 part 3).

gpt_tiny is compiled for examples/clusters/tiny_hetero.yaml (3 stages, one
with DP = 2), then the plan is edited and compiled again with --plan, once
with every stage "recompute": "full" and once with every stage
"selective".  Oracle: `hetc train`, single
process, same microbatching: every step's loss must agree to 1e-5 relative
(recompute replays the same host kernels, so the pipelined run equals the
run without recompute).  stages.txt must show the activation slot of the
transformer stage shrinking (full < selective <= none); `--recompute full`
overrides the plan.

usage: test_stages_recompute.py HETC WORKDIR
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
CLUSTER = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")
SEQ, MB, GB, STEPS = 64, 4, 16, 12
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


def compile_to(out, *extra):
    return run([HETC, MODEL, CLUSTER, "--seq", str(SEQ), "--microbatch", str(MB),
                "--global-batch", str(GB), "--threads", "2", "--steps", str(STEPS), *OPT, *extra,
                "-o", out], timeout=600)


def slot_mib(out):
    """act/slot MiB per stage from stages.txt"""
    rows = {}
    for line in open(os.path.join(out, "stages.txt")):
        f = line.split()
        if len(f) >= 10 and f[0].isdigit():
            rows[int(f[0])] = float(f[6])
    return rows


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
base = os.path.join(WORK, "base")
p = compile_to(base)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(base, "plan.json")))
K = plan["microbatches"]
ref = run([HETC, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch", str(MB),
           "--accum", str(K), "--seq", str(SEQ), *OPT, "--no-checkpoint"], timeout=900)
check(ref.returncode == 0, "hetc train failed")
ref_l = losses(ref.stdout)
slots0 = slot_mib(base)
# the stage holding most layers is the transformer stage
big = max(range(len(plan["stages"])),
          key=lambda s: plan["stages"][s]["layers"][1] - plan["stages"][s]["layers"][0])

variants = {
    "full": ["full"] * len(plan["stages"]),
    "selective": ["selective"] * len(plan["stages"]),
}
slots = {}
for name, modes in variants.items():
    edited = json.loads(json.dumps(plan))
    for s, m in zip(edited["stages"], modes):
        s["recompute"] = m
    pf = os.path.join(WORK, f"plan_{name}.json")
    json.dump(edited, open(pf, "w"), indent=1)
    out = os.path.join(WORK, name)
    p = compile_to(out, "--plan", pf)
    if not check(p.returncode == 0, f"{name}: hetc compile --plan exit {p.returncode}"):
        continue
    slots[name] = slot_mib(out)
    p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(STEPS)], timeout=600)
    check(p.returncode == 0, f"{name}: launch.sh exit {p.returncode}")
    got = losses(p.stdout)
    check(len(got) == STEPS, f"{name}: {len(got)} loss lines of {STEPS}")
    worst = max((abs(v - ref_l.get(k, float("nan"))) / abs(ref_l[k]) if k in ref_l else 1.0
                 for k, v in got.items()), default=1.0)
    check(worst <= 1e-5, f"{name}: loss vs hetc train: max relative difference {worst:.3g} > 1e-5")
    print(f"recompute {name} ({'/'.join(modes)}): {len(got)} steps == hetc train to {worst:.2g}; "
          f"act/slot MiB per stage {slots0} -> {slots[name]}", flush=True)

if "full" in slots:
    check(slots["full"][big] < slots0[big],
          f"full recompute: stage {big} slot {slots['full'][big]} MiB not below {slots0[big]}")
if "selective" in slots:
    check(slots["selective"][big] <= slots0[big],
          f"selective recompute: stage {big} slot grew: {slots['selective'][big]} > {slots0[big]}")
if "full" in slots and "selective" in slots:
    check(slots["full"][big] < slots["selective"][big], "full recompute should keep less than "
          "selective")

# hetc compile --recompute MODE overrides every stage's plan entry
out = os.path.join(WORK, "flag_full")
p = compile_to(out, "--plan", os.path.join(WORK, "plan_selective.json"), "--recompute", "full")
if check(p.returncode == 0, f"--recompute full: exit {p.returncode}") and "full" in slots:
    check(slot_mib(out) == slots["full"], f"--recompute full over a selective plan: slots "
          f"{slot_mib(out)} != the full plan's {slots['full']}")
p = compile_to(os.path.join(WORK, "flag_bad"), "--recompute", "most")
check(p.returncode == 2 and "--recompute most" in p.stderr, "--recompute most not refused")

print("FAILED" if failures else "OK", len(failures), "failures")
sys.exit(1 if failures else 0)
