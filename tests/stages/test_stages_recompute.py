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
import sys

from stagetest import StageTest, stages_txt

STEPS = 12
t = StageTest("tiny_hetero.yaml", horizon=STEPS)
check = t.check


def slot_mib(out):
    """act/slot MiB per stage from stages.txt"""
    return {s: float(f[6]) for s, f in stages_txt(out).items()}


base = t.path("base")
p = t.compile(base)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(base, "plan.json")))
K = plan["microbatches"]
ref_l = t.reference(STEPS, accum=K)
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
    pf = t.path(f"plan_{name}.json")
    json.dump(edited, open(pf, "w"), indent=1)
    out = t.path(name)
    p = t.compile(out, "--plan", pf)
    if not check(p.returncode == 0, f"{name}: hetc compile --plan exit {p.returncode}"):
        continue
    slots[name] = slot_mib(out)
    p = t.launch(out, STEPS, timeout=600)
    got, worst = t.expect_losses(p, f"recompute {name}", ref_l, n=STEPS)
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
out = t.path("flag_full")
p = t.compile(out, "--plan", t.path("plan_selective.json"), "--recompute", "full")
if check(p.returncode == 0, f"--recompute full: exit {p.returncode}") and "full" in slots:
    check(slot_mib(out) == slots["full"], f"--recompute full over a selective plan: slots "
          f"{slot_mib(out)} != the full plan's {slots['full']}")
p = t.compile(t.path("flag_bad"), "--recompute", "most", quiet=True)
check(p.returncode == 2 and "--recompute most" in p.stderr, "--recompute most not refused")

t.finish()
