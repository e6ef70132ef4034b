"""Stage binaries: bad input is reported clearly, nothing hangs, nothing is
left half-written (issue 6).

- a plan that cannot fit (devices with 0.01 GiB): hetc exits non-zero naming
  memory, and writes no stage binaries;
- hand-edited plans (--plan): a gap in the layers, tp = 0, more DP ranks than a
  microbatch has rows: errors naming the file and JSON key;
- a missing stage binary: launch.sh names it;
- a missing data file: the job fails naming the file, within the timeout;
- a stage rank that dies (SIGKILL) during training, checkpointing every step:
  launch.sh reports the failed job, non-zero, and --resume finds a complete
  checkpoint (a step directory without MANIFEST is never picked).

usage: test_stages_errors.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import sys

from stagetest import CLUSTERS, DATA, StageTest

# no --steps: these builds only have to compile or fail
t = StageTest("tiny_hetero.yaml")
check = t.check

# 1. a plan that cannot fit
small = t.path("small_mem.yaml")
txt = open(os.path.join(CLUSTERS, "tiny_hetero.yaml")).read()
for dev in ("V100-32GB", "A100-80GB", "T4"):
    txt = txt.replace(f"device: {dev}\n", f"device: {{base: {dev}, memory_gb: 0.0001}}\n")
open(small, "w").write(txt)
out = t.path("nofit")
p = t.compile(out, cluster=small, quiet=True, timeout=300)
check(p.returncode != 0, "a plan that cannot fit: exit 0")
check("memory" in p.stderr, f"a plan that cannot fit: no word of memory: {p.stderr[-400:]}")
check(not os.path.exists(os.path.join(out, "stage_0")), "stage binaries written for a plan that cannot fit")

# 2. a good build to break
out = t.path("build")
p = t.compile(out)
if not check(p.returncode == 0, f"compile failed: {p.stderr[-2000:]}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out, "plan.json")))


def bad_plan(name, edit, expect):
    q = json.loads(json.dumps(plan))
    edit(q)
    path = t.path(name + ".json")
    json.dump(q, open(path, "w"))
    r = t.compile(t.path("out_" + name), "--plan", path, quiet=True, timeout=300)
    check(r.returncode != 0, f"{name}: exit 0")
    check(path in r.stderr and re.search(expect, r.stderr) is not None,
          f"{name}: error should name {path} and match {expect!r}: {r.stderr[-300:]}")


def gap(q):
    q["stages"][1]["layers"][0] += 1


def tp0(q):
    q["stages"][0]["tp"] = 0


def dp_over_rows(q):
    # dp need not divide a microbatch's rows since uneven data parallelism
    # (issue 18); more DP ranks than rows leaves a rank without a row
    q["stages"][0]["dp"] = 999


bad_plan("gap", gap, r"stages\[1\]\.\"layers\"")
bad_plan("tp0", tp0, r"stages\[0\]\.\"tp\"")
bad_plan("dp_over_rows", dp_over_rows, r"stages\[0\]\.\"dp\"")

# 3. a missing stage binary
broken = t.path("broken")
shutil.copytree(out, broken)
os.remove(os.path.join(broken, "stage_1"))
p = t.launch(broken, 1, quiet=True, timeout=120)
check(p.returncode != 0 and "missing stage binary" in p.stderr and "stage_1" in p.stderr,
      f"missing stage binary: {p.returncode} {p.stderr[-300:]}")

# 4. a missing data file
env = dict(os.environ, HETRT_TIMEOUT_S="20")
p = t.run([os.path.join(out, "launch.sh"), "--data", t.path("nope.bin"), "--steps", "1"],
          quiet=True, timeout=300, env=env)
check(p.returncode != 0 and "nope.bin" in p.stderr, f"missing data: {p.returncode} {p.stderr[-400:]}")

# 5. a rank that dies mid-run
ck = t.path("ckpt")
cmd = [os.path.join(out, "launch.sh"), "--data", DATA, "--steps", "40", "--checkpoint-dir", ck,
       "--checkpoint-every", "1"]
rc, _, err, killed = t.run_killing(cmd, os.path.join(out, "stage_2"), 3, limit_s=300, env=env)
check(killed, "never reached step 3")
check(rc != 0 and "launch.sh: the job failed" in err, f"dead rank not reported: {rc}")
# the newest complete checkpoint must load: --resume continues
p = t.run(cmd[:-4] + ["--steps", "5", "--checkpoint-dir", ck, "--resume"], quiet=True, timeout=300,
          env=env)
check(p.returncode == 0, f"--resume after the dead rank failed: {p.stderr[-400:]}")

t.finish()
