"""A one-rank plan runs without MPI (issue 15: a one-stage program's peak
RSS at or below llm.c's; MPI_Init alone was ~15 MB of it).  gpt_tiny
compiled onto one_host.yaml (one stage, DP 1, TP 1):

  - launch.sh --dry-run prints the stage binary itself, no mpirun (with
    MPIRUN set it prints the mpirun command: the user can force one);
  - launch.sh trains with mpirun, mpiexec, orterun and srun on PATH
    replaced by scripts that fail loudly: it exits 0, never called them,
    the rank says it runs without MPI, and its losses equal hetc train's
    (the single-process trainer, the oracle of every stage test) to 1e-5
    relative on the same batches;
  - the same binary under `mpirun -np 1` (MPI initialised: the transport
    the multi-rank plans use) prints the same loss text as the solo run;
  - a DP 2 build of the same model (plan.json hand-edited, hetc compile
    --plan) keeps its mpirun launch.sh, and its stage binary started
    without a launcher fails naming launch.sh and the 2 ranks it needs.

usage: test_stages_solo.py HETC WORKDIR
"""
import json
import os
import shutil
import stat

import stagetest
from stagetest import StageTest

STEPS = 6
t = StageTest("one_host.yaml", gb=8, horizon=STEPS)
check = t.check

# the environment of a process no launcher started (ctest is not one)
LAUNCHER = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "SLURM_NTASKS",
            "SLURM_STEP_NUM_TASKS")
plain = {k: v for k, v in os.environ.items() if k not in LAUNCHER}

out = t.path("one")
if not check(t.compile(out).returncode == 0, "hetc compile onto one_host.yaml failed"):
    t.finish()
ref = t.reference(STEPS)
check(len(ref) == STEPS, f"hetc train printed {len(ref)} losses of {STEPS}")
binary = os.path.join(out, "stage_0")
args = ["--data", stagetest.DATA, "--steps", str(STEPS)]

# 1. the command launch.sh runs
p = t.run([os.path.join(out, "launch.sh"), "--dry-run", *args], env=plain)
cmd = p.stdout.split()
check(p.returncode == 0 and cmd[:1] == [binary] and "mpirun" not in p.stdout,
      f"launch.sh --dry-run of a one-rank plan: want {binary} itself, got {p.stdout!r}")
p = t.run([os.path.join(out, "launch.sh"), "--dry-run", *args], env=dict(plain, MPIRUN="mpirun"))
check(p.returncode == 0 and p.stdout.startswith("mpirun "),
      f"MPIRUN=mpirun launch.sh --dry-run: want the mpirun command, got {p.stdout!r}")

# 2. the run, every launcher on PATH failing loudly
fake = t.path("fakebin")
os.makedirs(fake)
for name in ("mpirun", "mpiexec", "orterun", "srun"):
    f = os.path.join(fake, name)
    with open(f, "w") as w:
        w.write(f"#!/bin/sh\necho 'FAKE {name} CALLED' >&2\nexit 97\n")
    os.chmod(f, os.stat(f).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
env = dict(plain, PATH=fake + os.pathsep + plain.get("PATH", ""))
p = t.launch(out, STEPS, env=env)
solo, w = t.expect_losses(p, "launch.sh without MPI", ref, n=STEPS)
check("FAKE" not in p.stderr, f"launch.sh called a launcher: {p.stderr[-500:]}")
check("no launcher: one process without MPI" in p.stderr,
      f"the rank does not say it runs without MPI: {p.stderr[-800:]}")
print(f"one-rank launch.sh without mpirun: {len(solo)} steps == hetc train to {w:.2g} relative "
      f"(step {STEPS} {solo.get(STEPS)})", flush=True)
solo_text = stagetest.losses(p.stdout, as_text=True)

# 3. the same binary under mpirun -np 1
mpirun = shutil.which("mpirun", path=plain.get("PATH"))
if check(mpirun is not None, "no mpirun on PATH"):
    # --bind-to none, as launch.sh runs mpirun: bound to one core (mpirun's default for
    # -np 1) the run differs in the 8th digit -- as `taskset -c 0` does without MPI, and
    # hetc train too: the CPUs a process may use change the last digits, not the transport
    cmd = [mpirun] + (["--allow-run-as-root"] if os.getuid() == 0 else []) + ["--bind-to", "none"]
    p = t.run(cmd + ["-np", "1", binary, *args, "--checkpoint-dir", t.path("ckpt_mpirun")],
              env=plain)
    check(p.returncode == 0, f"stage_0 under mpirun -np 1: exit {p.returncode}")
    check("mpirun local rank 0" in p.stderr and "without MPI" not in p.stderr,
          f"stage_0 under mpirun -np 1 does not say it runs under mpirun: {p.stderr[-800:]}")
    got = stagetest.losses(p.stdout, as_text=True)
    check(got == solo_text and len(got) == STEPS,
          f"mpirun -np 1's losses {got} differ from the solo run's {solo_text}")
    if got == solo_text:
        print(f"stage_0 under mpirun -np 1: the same {len(got)} loss lines as without MPI",
              flush=True)

# 4. a two-rank plan started without a launcher
plan = json.load(open(os.path.join(out, "plan.json")))
plan["stages"][0]["dp"] = 2
plan["stages"][0].pop("rows", None)
path = t.path("plan_dp2.json")
json.dump(plan, open(path, "w"), indent=1)
out2 = t.path("dp2")
if check(t.compile(out2, "--plan", path).returncode == 0, "hetc compile --plan (DP 2) failed"):
    p = t.run([os.path.join(out2, "launch.sh"), "--dry-run", *args], env=plain)
    check(p.returncode == 0 and "mpirun" in p.stdout and "-np 2" in p.stdout,
          f"a DP 2 plan's launch.sh --dry-run: want mpirun -np 2, got {p.stdout!r}")
    p = t.run([os.path.join(out2, "stage_0"), *args, "--checkpoint-dir", t.path("ckpt_dp2")],
              quiet=True, env=env)
    err = p.stderr
    check(p.returncode != 0 and "without a launcher" in err and "launch.sh" in err
          and "world is 2 ranks" in err and "FAKE" not in err,
          f"a DP 2 stage binary run alone: exit {p.returncode}, want a message naming "
          f"launch.sh and 2 ranks: {err[-800:]}")
    if p.returncode:
        print("a DP 2 stage binary run alone:", err.strip().splitlines()[0], flush=True)
t.finish()
