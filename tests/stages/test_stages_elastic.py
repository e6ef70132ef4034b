"""launch.sh --elastic (issue 18 item 6): a mesh lost mid-run is re-planned
away and the run finishes on the survivors with nothing lost or repeated.

gpt_tiny on tiny_hetero.yaml, 15 steps, --checkpoint-every 5.  The test hook
HETC_FAULT_INJECT=stage:S,step:7 makes the ranks of the last stage (one mesh)
exit at step 7.  Under --elastic the launcher must recompile on the other
meshes and resume from the step-5 checkpoint.  Oracles:
- an independent run on the survivors' plan: this test writes the cluster
  without the lost mesh itself (yaml), compiles it, and resumes a copy of
  the step-5 checkpoint to step 15 without any fault: the elastic record's
  steps 6..15 must equal it to 1e-5;
- hetc train (one process) for steps 1..15: the whole record equals it to
  1e-5 (the trajectory does not depend on the plan);
- the record (ELASTIC_DIR/losses.txt: the step lines of the attempt whose
  state survived, steps 1..5 of the first job and 6..15 of the second) holds
  each step exactly once; recovery.json names the lost mesh, step 7, the
  resume from step 5 and four non-negative times; CK/metrics.jsonl (the
  stages' own record, cut back to the checkpoint on resume) holds the same
  steps once each with the same losses.
Bad cases, each non-zero with a message: the only mesh lost (no survivors;
its rank SIGKILLed by the test, so mpirun's own report names it), and
survivors whose memory cannot hold the model.

usage: test_stages_elastic.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import signal
import subprocess

import yaml

from stagetest import CLUSTERS, DATA, StageTest, losses, worst_rel

N, EVERY, FAULT = 15, 5, 7
t = StageTest("tiny_hetero.yaml", horizon=N)
check = t.check
out = t.path("build")
p = t.compile(out)
if not check(p.returncode == 0, "compile"):
    t.finish()
plan = json.load(open(os.path.join(out, "plan.json")))
S = len(plan["stages"]) - 1
lost = plan["stages"][S]["mesh"]
check(all(s["mesh"] != lost for s in plan["stages"][:S]), f"stage {S}'s mesh {lost} holds one stage")


def elastic(build, ck, edir, fault, steps=N):
    env = dict(os.environ, HETC_FAULT_INJECT=fault)
    return t.run([os.path.join(build, "launch.sh"), "--elastic", "--elastic-dir", edir, "--data",
                  DATA, "--steps", str(steps), "--checkpoint-every", str(EVERY),
                  "--checkpoint-dir", ck], quiet=True, env=env)


def kill_after(build, ck, edir, step):
    """--elastic with no fault hook: SIGKILL stage_0's ranks (their own processes, not mpirun,
    whose command line names them too) once step `step` is printed."""
    cmd = [os.path.join(build, "launch.sh"), "--elastic", "--elastic-dir", edir, "--data", DATA,
           "--steps", str(N), "--checkpoint-dir", ck]
    print("$", " ".join(cmd), f"(SIGKILL to stage_0 after step {step})", flush=True)
    pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    for line in pr.stdout:
        if re.match(r"step\s+%d/" % step, line):
            q = subprocess.run(["pgrep", "-f", "^" + os.path.join(build, "stage_0")],
                               capture_output=True, text=True)
            for pid in q.stdout.split():
                os.kill(int(pid), signal.SIGKILL)
            break
    try:
        out, err = pr.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(pr.pid, signal.SIGKILL)
        out, err = pr.communicate()
        check(False, "the --elastic job hung after a rank was killed")
    return subprocess.CompletedProcess(cmd, pr.returncode, out, err)


edir, ck = t.path("elastic"), t.path("ck")
p = elastic(out, ck, edir, f"stage:{S},step:{FAULT}")
print(p.stdout[-2500:], p.stderr[-2500:], sep="\n", flush=True)
check(p.returncode == 0, f"--elastic run: exit {p.returncode}")
rec_text = open(os.path.join(edir, "losses.txt")).read() if os.path.exists(
    os.path.join(edir, "losses.txt")) else ""
steps = [int(m) for m in re.findall(r"^step\s+(\d+)/", rec_text, re.M)]
check(steps == list(range(1, N + 1)), f"the record's steps: {steps}, want 1..{N} once each")
check("HETC_FAULT_INJECT: stage %d exits at step %d" % (S, FAULT) in p.stderr + p.stdout,
      "the fault hook did not fire")
rec = losses(rec_text)
att = dict(re.findall(r"^step\s+(\d+)/.*\| attempt (\d+)$", rec_text, re.M))
check(all(att.get(str(k)) == ("1" if k <= EVERY else "2") for k in range(1, N + 1)),
      f"steps 1..{EVERY} from attempt 1, the rest from attempt 2: {att}")

# the runtime's own record, CK/metrics.jsonl: a resumed job drops the lines past its checkpoint
# and appends, so it too must hold each step once, with the record's losses
mj = [json.loads(x) for x in open(os.path.join(ck, "metrics.jsonl"))] if os.path.exists(
    os.path.join(ck, "metrics.jsonl")) else []
check([m.get("step") for m in mj] == list(range(1, N + 1)),
      f"metrics.jsonl steps {[m.get('step') for m in mj]}, want 1..{N} once each")
w = worst_rel({m["step"]: m["loss"] for m in mj if "step" in m and "loss" in m}, rec)
check(w <= 1e-7, f"metrics.jsonl losses vs losses.txt: {w:.3g}")

js = {}
try:
    js = json.load(open(os.path.join(edir, "recovery.json")))
except (OSError, ValueError) as e:
    check(False, f"recovery.json: {e}")
r = (js.get("recoveries") or [{}])[0]
check(js.get("attempts") == 2 and len(js.get("recoveries", [])) == 1, f"recovery.json: {js}")
check(r.get("lost_mesh") == lost and r.get("lost_stage") == S, f"lost mesh/stage: {r}")
check(r.get("failed_in_step") == FAULT and r.get("resumed_from_step") == EVERY,
      f"failed in step {r.get('failed_in_step')}, resumed from {r.get('resumed_from_step')}")
times = [r.get(k) for k in ("detect_s", "replan_s", "compile_s", "reload_s")]
check(all(isinstance(x, (int, float)) and x >= 0 for x in times), f"recovery times {times}")
print("recovery (detect, re-plan, compile, reload) s:", times, flush=True)
new_plan = json.load(open(os.path.join(r.get("build", out), "plan.json")))
check(all(s["mesh"] != lost for s in new_plan["stages"]), "the new plan still uses the lost mesh")

# oracle 1: the survivors' plan, compiled here, resumed from a copy of the step-5 checkpoint
cl = yaml.safe_load(open(os.path.join(CLUSTERS, "tiny_hetero.yaml")))
cl["meshes"] = [m for m in cl["meshes"] if m["name"] != lost]
cl["links"] = [x for x in cl.get("links", []) if lost not in x["between"]]
surv = t.path("survivors.yaml")
yaml.safe_dump(cl, open(surv, "w"))
sb = t.path("survivors")
p = t.compile(sb, cluster=surv)
if check(p.returncode == 0, "compile on the survivors"):
    ck5 = t.path("ck5")
    os.makedirs(ck5)
    step5 = "step_%08d" % EVERY
    shutil.copytree(os.path.join(ck, step5), os.path.join(ck5, step5))
    q = t.launch(sb, N, "--checkpoint-dir", ck5, "--resume")
    ref = losses(q.stdout)
    check(q.returncode == 0 and sorted(ref) == list(range(EVERY + 1, N + 1)),
          f"survivors from step {EVERY}: steps {sorted(ref)}")
    after = {k: v for k, v in rec.items() if k > EVERY}
    w = worst_rel(after, ref)
    check(w <= 1e-5, f"steps {EVERY + 1}..{N} vs the survivors' run from step {EVERY}: {w:.3g}")
    print(f"elastic steps {EVERY + 1}..{N} == survivors' plan from step {EVERY} to {w:.2g}", flush=True)

# oracle 2: hetc train, the whole record
ref = t.reference(N)
w = worst_rel(rec, ref)
check(len(rec) == N and w <= 1e-5, f"the record vs hetc train: {w:.3g}")
print(f"elastic record steps 1..{N} == hetc train to {w:.2g}", flush=True)

# bad cases: the only mesh lost; survivors that cannot hold the model.  "two": two devices of
# 1.02 GiB; the planner's need for the whole model on one device is ~1.027 GiB (1 GiB runtime
# reserve + the arena: 16 B per parameter, activations, scratch): two stages fit, one alone does not.
def dev(base, gb):
    return {"base": base, "memory_gb": gb} if gb else base


def cluster(name, *meshes):
    return {"name": name, "dtype": "fp16",
            "meshes": [{"name": n, "device": dev(b, gb), "nodes": 1, "devices_per_node": 1}
                       for n, b, gb in meshes],
            "default_link": {"bandwidth_gbps": 10, "latency_us": 50, "transport": "cpu-mediated"}}


bad = (("one", cluster("one", ("a100", "A100-80GB", None)), 1, r"no mesh survives"),
       ("two", cluster("two", ("a100", "A100-80GB", 1.02), ("t4", "T4", 1.02)), 2,
        r"cannot be planned or compiled on the survivors"))
for name, c, nst, want in bad:
    path = t.path(name + ".yaml")
    yaml.safe_dump(c, open(path, "w"))
    b = t.path("build_" + name)
    p = t.compile(b, cluster=path)
    if not check(p.returncode == 0, f"compile on {name}"):
        continue
    pl = json.load(open(os.path.join(b, "plan.json")))
    check(len({s["mesh"] for s in pl["stages"]}) == nst, f"{name}: want {nst} meshes in the plan")
    if name == "one":  # a rank SIGKILLed from here: mpirun's "process rank R ... signal" names it
        p = kill_after(b, t.path("ck_" + name), t.path("el_" + name), 2)
        check("rank 0 (stage 0, mesh a100) lost" in p.stderr, f"one: lost rank: {p.stderr[-600:]}")
    else:
        p = elastic(b, t.path("ck_" + name), t.path("el_" + name), "stage:0,step:2", steps=4)
    check(p.returncode != 0, f"{name}: exit 0 after losing a mesh")
    check(re.search(want, p.stderr) is not None, f"{name}: no '{want}': {p.stderr[-600:]}")
    print(f"{name}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1]}", flush=True)
t.finish()
