"""bf16-mixed is the default training precision (issue 17).

Every command here is run as written (pin=None: stagetest otherwise adds
--precision fp32), on gpt_tiny and examples/clusters/one_host.yaml:

  - `hetc train` without --precision prints the same step lines, digit for
    digit, as `--precision bf16-mixed`, and other losses than
    `--precision fp32` (a default that silently stayed fp32 fails here);
    its header names the precision;
  - `hetc plan` without --precision writes plan.json "precision"
    "bf16-mixed" and plan.txt's precision line says so; with
    --precision fp32 they say fp32;
  - `hetc compile` without --precision compiles bf16-mixed (its stderr,
    plan.json, stages.txt; elastic.env pins it for a re-plan), and its
    stage binary's 4 steps through launch.sh follow the default hetc train
    within bf16's tolerance (the stage tests' 5e-3), not fp32's losses;
  - `hetc compile --plan FILE` without --precision compiles the plan's
    "precision" (an fp32 plan from hetc plan compiles fp32);
  - the cluster-dtype refusal names bf16-mixed as the default.

--backend cuda's fp32 default is checked by tests/cuda/test_cuda_backend.py
(it needs a hetc built with CUDA, not a GPU).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stagetest  # noqa: E402
from stagetest import DATA, MODEL, OPT, StageTest  # noqa: E402

STEPS = 4
t = StageTest("one_host.yaml", seq=64, mb=4, gb=4, horizon=STEPS)
check = t.check
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def train(*prec):
    return t.run([t.hetc, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch",
                  "4", "--seq", "64", *OPT, "--no-checkpoint", *prec], pin=None, env=ENV)


# 1. hetc train
runs = {name: train(*prec) for name, prec in (("default", ()),
                                              ("bf16", ("--precision", "bf16-mixed")),
                                              ("fp32", ("--precision", "fp32")))}
if check(all(p.returncode == 0 for p in runs.values()), "a hetc train failed"):
    lines = {k: stagetest.step_lines(p.stdout) for k, p in runs.items()}
    check(len(lines["default"]) == STEPS and lines["default"] == lines["bf16"],
          f"hetc train without --precision differs from --precision bf16-mixed: "
          f"{lines['default']} vs {lines['bf16']}")
    d32 = stagetest.worst_rel(stagetest.losses(runs["default"].stdout),
                              stagetest.losses(runs["fp32"].stdout))
    check(d32 > 1e-6, f"hetc train without --precision prints fp32's losses ({d32:.2g})")
    head = [l for l in runs["default"].stdout.splitlines() if l.startswith("hetc train:")]
    check(head and ", bf16-mixed, " in head[0], f"hetc train's header names no bf16-mixed: {head}")
    print(f"hetc train default == --precision bf16-mixed ({STEPS} step lines, as text); "
          f"vs fp32 {d32:.2g} relative", flush=True)

# 2. hetc plan
common = [MODEL, os.path.join(stagetest.CLUSTERS, t.cluster), "--seq", "64", "--microbatch",
          "4", "--global-batch", "4", "--threads", "2"]
for tag, prec, want in (("plan_default", (), "bf16-mixed"),
                        ("plan_fp32", ("--precision", "fp32"), "fp32")):
    p = t.run([t.hetc, "plan", *common, *prec, "-o", t.path(tag)], pin=None)
    if check(p.returncode == 0, f"hetc plan {' '.join(prec)}: exit {p.returncode}"):
        got = json.load(open(t.path(tag, "plan.json"))).get("precision")
        txt = open(t.path(tag, "plan.txt")).read()
        check(got == want and re.search(rf"^precision {want} ", txt, re.M),
              f"hetc plan {' '.join(prec) or '(no --precision)'}: plan.json precision {got}, "
              f"want {want}; plan.txt:\n{txt[:400]}")

# 3. hetc compile, and its stage binary
out = t.path("compiled")
p = t.compile(out, pin=None)
if check(p.returncode == 0, f"hetc compile (no --precision): exit {p.returncode}"):
    check("compile: precision bf16-mixed (the default)" in p.stderr,
          "hetc compile does not say it compiles bf16-mixed by default:\n" + p.stderr[-800:])
    got = json.load(open(os.path.join(out, "plan.json"))).get("precision")
    check(got == "bf16-mixed", f"compiled plan.json precision {got}")
    check("per rank, bf16-mixed" in open(os.path.join(out, "stages.txt")).read(),
          "stages.txt does not say bf16-mixed")
    env = open(os.path.join(out, "elastic.env")).read()
    check("--precision 'bf16-mixed'" in env, f"elastic.env does not pin the precision: {env}")
    if "default" in runs and runs["default"].returncode == 0:
        ref = stagetest.losses(runs["default"].stdout)
        r = t.launch(out, STEPS)
        got, w = t.expect_losses(r, "default compile", ref, n=STEPS, tol=5e-3)
        d32 = stagetest.worst_rel(got, stagetest.losses(runs["fp32"].stdout))
        check(d32 > 1e-6, f"the default compile's stage binary prints fp32's losses ({d32:.2g})")
        print(f"default compile: {STEPS} steps within {w:.2g} of the default hetc train, "
              f"{d32:.2g} from fp32's", flush=True)

# 4. --plan FILE without --precision: the plan's precision
if os.path.exists(t.path("plan_fp32", "plan.json")):
    out32 = t.path("from_fp32_plan")
    p = t.compile(out32, "--plan", t.path("plan_fp32", "plan.json"), pin=None)
    if check(p.returncode == 0, f"hetc compile --plan (fp32 plan): exit {p.returncode}"):
        check('compile: precision fp32 (the plan\'s "precision")' in p.stderr and
              "per rank, fp32" in open(os.path.join(out32, "stages.txt")).read(),
              "compile --plan of an fp32 plan without --precision is not fp32:\n"
              + p.stderr[-800:])

# 5. the refusal names the default
p = t.run([t.hetc, "train", MODEL, "--data", DATA, "--steps", "1", "--precision",
           "cluster-dtype"], pin=None, quiet=True)
check(p.returncode == 2 and "bf16-mixed (the default)" in p.stderr,
      f"hetc train --precision cluster-dtype: exit {p.returncode}: {p.stderr[-300:]}")
t.finish()
