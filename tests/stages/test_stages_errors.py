"""Stage binaries: bad input is reported clearly, nothing hangs, nothing is
left half-written (issue 6).

- a plan that cannot fit (devices with 0.01 GiB): hetc exits non-zero naming
  memory, and writes no stage binaries;
- hand-edited plans (--plan): a gap in the layers, tp = 2, dp not dividing the
  microbatch: errors naming the file and JSON key;
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
import subprocess
import sys
import time

HETC, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CL = os.path.join(SRC, "examples", "clusters")
COMMON = ["--seq", "64", "--microbatch", "4", "--global-batch", "16", "--threads", "2"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(cmd, **kw):
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# 1. a plan that cannot fit
small = os.path.join(WORK, "small_mem.yaml")
txt = open(os.path.join(CL, "tiny_hetero.yaml")).read()
for dev in ("V100-32GB", "A100-80GB", "T4"):
    txt = txt.replace(f"device: {dev}\n", f"device: {{base: {dev}, memory_gb: 0.0001}}\n")
open(small, "w").write(txt)
out = os.path.join(WORK, "nofit")
p = run([HETC, MODEL, small, *COMMON, "-o", out], timeout=300)
check(p.returncode != 0, "a plan that cannot fit: exit 0")
check("memory" in p.stderr, f"a plan that cannot fit: no word of memory: {p.stderr[-400:]}")
check(not os.path.exists(os.path.join(out, "stage_0")), "stage binaries written for a plan that cannot fit")

# 2. a good build to break
out = os.path.join(WORK, "build")
p = run([HETC, MODEL, os.path.join(CL, "tiny_hetero.yaml"), *COMMON, "-o", out], timeout=600)
if not check(p.returncode == 0, f"compile failed: {p.stderr[-2000:]}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out, "plan.json")))


def bad_plan(name, edit, expect):
    q = json.loads(json.dumps(plan))
    edit(q)
    path = os.path.join(WORK, name + ".json")
    json.dump(q, open(path, "w"))
    o = os.path.join(WORK, "out_" + name)
    r = run([HETC, MODEL, os.path.join(CL, "tiny_hetero.yaml"), *COMMON, "--plan", path, "-o", o],
            timeout=300)
    check(r.returncode != 0, f"{name}: exit 0")
    check(path in r.stderr and re.search(expect, r.stderr) is not None,
          f"{name}: error should name {path} and match {expect!r}: {r.stderr[-300:]}")


def gap(q):
    q["stages"][1]["layers"][0] += 1


def tp0(q):
    q["stages"][0]["tp"] = 0


def dp3(q):
    q["stages"][0]["dp"] = 3


bad_plan("gap", gap, r"stages\[1\]\.\"layers\"")
bad_plan("tp0", tp0, r"stages\[0\]\.\"tp\"")
bad_plan("dp3", dp3, r"stages\[0\]\.\"dp\"")

# 3. a missing stage binary
broken = os.path.join(WORK, "broken")
shutil.copytree(out, broken)
os.remove(os.path.join(broken, "stage_1"))
p = run([os.path.join(broken, "launch.sh"), "--data", DATA, "--steps", "1"], timeout=120)
check(p.returncode != 0 and "missing stage binary" in p.stderr and "stage_1" in p.stderr,
      f"missing stage binary: {p.returncode} {p.stderr[-300:]}")

# 4. a missing data file
env = dict(os.environ, HETRT_TIMEOUT_S="20")
p = run([os.path.join(out, "launch.sh"), "--data", os.path.join(WORK, "nope.bin"), "--steps", "1"],
        timeout=300, env=env)
check(p.returncode != 0 and "nope.bin" in p.stderr, f"missing data: {p.returncode} {p.stderr[-400:]}")

# 5. a rank that dies mid-run
ck = os.path.join(WORK, "ckpt")
cmd = [os.path.join(out, "launch.sh"), "--data", DATA, "--steps", "40", "--checkpoint-dir", ck,
       "--checkpoint-every", "1"]
print("$", " ".join(cmd), "(SIGKILL to stage_2 after step 3)", flush=True)
pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
t0, killed = time.time(), False
while time.time() - t0 < 300:
    line = pr.stdout.readline()
    if not line:
        break
    m = re.match(r"step\s+(\d+)/", line)
    if m and int(m.group(1)) >= 3:
        subprocess.run(["pkill", "-KILL", "-f", os.path.join(out, "stage_2")])
        killed = True
        break
try:
    _, err = pr.communicate(timeout=300)
except subprocess.TimeoutExpired:
    pr.kill()
    err = ""
    check(False, "the job hung after a rank died")
check(killed, "never reached step 3")
check(pr.returncode != 0 and "launch.sh: the job failed" in err, f"dead rank not reported: {pr.returncode}")
# the newest complete checkpoint must load: --resume continues
p = run(cmd[:-4] + ["--steps", "5", "--checkpoint-dir", ck, "--resume"], timeout=300, env=env)
check(p.returncode == 0, f"--resume after the dead rank failed: {p.stderr[-400:]}")

print("FAILED" if failures else "OK", len(failures), "failures")
sys.exit(1 if failures else 0)
