"""Slurm for real (issue 19): the compiled 3-stage example through sbatch.

A three-node Slurm runs on this machine (tests/stages/slurmlocal.py:
munged, slurmctld, a slurmd per node n1..n3, each node a UTS namespace of
that name, 2 CPUs, no GRES, loopback only).  gpt_tiny compiled onto
tiny_hetero.yaml (stage_0 x1, stage_1 x2, stage_2 x1, one mesh each) is
submitted as the build's own job.sbatch: `sbatch --wait job.sbatch --data
... --steps 10`, which runs launch.sh --slurm: a check of the allocation
and of the stage binaries on every node, then srun --mpi=pmix
--multi-prog with mesh k's ranks on node k.

Checked: 10 steps' losses equal `hetc train` (1e-5 relative); each rank's
start-up line names the node its mesh maps to, Slurm's local id and the
local rank the CUDA backend would take its GPU by; an allocation with too
few tasks (--nodes=1 --ntasks-per-node=2, submitted by launch.sh --slurm
from outside an allocation: sbatch job.sbatch with HETC_SBATCH_ARGS) fails
naming the tasks it has and the tasks the plan needs; a second build whose
stage_1 is hidden on node n2 only (that slurmd's mount namespace) fails
naming the binary and the node.  Every daemon is stopped at the end (also when the test fails) and none is left.

usage: test_stages_slurm.py HETC WORKDIR
"""
import os
import re
import subprocess
import sys
import time

import slurmlocal
from stagetest import DATA, StageTest, losses, worst_rel

STEPS = 10
NODES = ["n1", "n2", "n3"]

why = slurmlocal.missing()
if why:
    print("SKIP:", why)
    sys.exit(77)

t = StageTest("tiny_hetero.yaml", horizon=STEPS + 5)
check = t.check
out, out_b = t.path("build"), t.path("build_b")
for o in (out, out_b):
    p = t.compile(o)
    if not check(p.returncode == 0, f"hetc compile into {o}: exit {p.returncode}"):
        t.finish()
stages = [int(x) for x in re.search(r"^stages=\(([^)]*)\)", open(os.path.join(out, "launch.sh")).read(),
                                    re.M).group(1).split()]
check(stages == [1, 2, 1], f"want stage_0 x1, stage_1 x2, stage_2 x1 (one mesh each): {stages}")
sb = open(os.path.join(out, "job.sbatch")).read()
check("#SBATCH --nodes=3" in sb and "#SBATCH --ntasks-per-node=2" in sb and "#SBATCH --time=" in sb,
      f"job.sbatch: {sb}")
ref = t.reference(STEPS + 5)

hidden = os.path.join(out_b, "stage_1")  # build_b's stage_1 is not on node n2
stepd_before = set(slurmlocal.running("slurmstepd"))
sl = slurmlocal.LocalSlurm(NODES, cpus=2, keep_logs=t.path("slurm-logs"), hide={"n2": [hidden]})
try:
    sl.start()
    # for all sbatch runs, from here: the compiles and hetc train before take up to a few
    # minutes under ASan; CMakeLists gives the whole test 900 s
    deadline = time.time() + 420
    print("slurm:", sl.run(["sinfo", "-N"]).stdout.strip().replace("\n", " | "), flush=True)

    def sbatch(build, label, *opts, steps=STEPS):
        log = t.path(f"{label}.out")
        cmd = ["sbatch", "--wait", f"--output={log}", *opts, os.path.join(build, "job.sbatch"),
               "--data", DATA, "--steps", str(steps), "--checkpoint-dir", t.path("ckpt_" + label)]
        print("$", " ".join(cmd), flush=True)
        try:  # a guard within ctest's limit (then the daemons still get stopped)
            r = sl.run(cmd, timeout=max(10, deadline - time.time()), cwd=t.work)
        except subprocess.TimeoutExpired:
            r = subprocess.CompletedProcess(cmd, 124, "", "sbatch --wait timed out: " +
                                            sl.run(["squeue", "-o", "%i %T %r"]).stdout)
        text = open(log, errors="replace").read() if os.path.exists(log) else ""
        return r, text

    r, text = sbatch(out, "train", "--export=ALL,HETC_THREADS=1")
    if not check(r.returncode == 0, f"sbatch job.sbatch: exit {r.returncode} {r.stderr[-500:]}\n"
                 f"{text[-3000:]}"):
        print(sl.logs())
    got = losses(text)
    check(len(got) == STEPS, f"{len(got)} loss lines of {STEPS}")
    w = worst_rel(got, ref)
    check(w <= 1e-5, f"sbatch run vs hetc train: max relative difference {w:.3g} > 1e-5")
    print(f"sbatch: {len(got)} steps == hetc train to {w:.2g} relative", flush=True)

    bind = {int(m.group(1)): m.groups()[1:] for m in re.finditer(
        r"^\[hetrt rank (\d+)\] stage (\d+) dp \S+ tp \S+ on host (\S+): local rank (\d+) of (\d+), "
        r"slurm node (\S+) local id (\d+);", text, re.M)}
    want = {0: ("0", "n1", 0, 1), 1: ("1", "n2", 0, 2), 2: ("1", "n2", 1, 2), 3: ("2", "n3", 0, 1)}
    check(sorted(bind) == [0, 1, 2, 3], f"a start-up line per rank: {sorted(bind)}")
    for r_, (stage, host, local, nlocal, node, localid) in sorted(bind.items()):
        check((stage, host, int(local), int(nlocal)) == want.get(r_),
              f"rank {r_}: stage {stage} host {host} local {local}/{nlocal}, want {want.get(r_)}")
        check(node == host and int(localid) == int(local),
              f"rank {r_}: Slurm says node {node} local id {localid}")
    print("binding:", "; ".join(f"rank {k} -> {b[1]} local {b[2]}/{b[3]} (stage {b[0]})"
                                 for k, b in sorted(bind.items())), flush=True)

    # too few tasks: one node, two tasks, for four ranks; submitted by launch.sh --slurm
    # outside an allocation (it runs sbatch job.sbatch with HETC_SBATCH_ARGS)
    log = t.path("few.out")
    cmd = [os.path.join(out, "launch.sh"), "--slurm", "--data", DATA, "--steps", "1",
           "--checkpoint-dir", t.path("ckpt_few")]
    print("$", " ".join(cmd), flush=True)
    r = sl.run(cmd, timeout=max(10, deadline - time.time()), env=dict(
        sl.env, HETC_SBATCH_ARGS=f"--wait --output={log} --nodes=1 --ntasks-per-node=2"))
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    check("submitting" in r.stderr and "job.sbatch" in r.stderr,
          f"launch.sh --slurm outside an allocation: {r.stderr[-300:]}")
    check(r.returncode != 0 and re.search(r"has 2 tasks, the plan needs 4 \(stage_0 x1 \+ stage_1 x2 "
                                          r"\+ stage_2 x1\)", text) is not None,
          f"too few tasks: exit {r.returncode}: {text[-600:]}")
    print("too few tasks:", [ln for ln in text.splitlines() if ln.startswith("launch.sh")], flush=True)

    # build_b's stage_1 missing on n2 (present here and on n1, n3)
    r, text = sbatch(out_b, "hidden", steps=1)
    check(r.returncode != 0 and f"node n2: stage binary {hidden} is missing or not executable" in text
          and "step " not in text, f"stage_1 missing on n2: exit {r.returncode}: {text[-800:]}")
    print("stage_1 missing on n2:", [ln for ln in text.splitlines() if ln.startswith("launch.sh")],
          flush=True)
finally:
    started = dict(sl.procs)
    sl.stop()
left = {k: pid for k, pid in started.items() if slurmlocal.alive(pid)}
check(not left, f"daemons left running: {left}")
stepd = set(slurmlocal.running("slurmstepd")) - stepd_before
check(not stepd, f"slurmstepd left running: {stepd}")
t.finish()
