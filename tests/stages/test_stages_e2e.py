"""Stage binaries end to end (issue 6).

The example GPT (examples/gpt_tiny.onnx) is compiled onto
examples/clusters/tiny_hetero.yaml: three meshes of three GPU generations,
planned into stages of different sizes with one data-parallel stage (the
test asserts that shape of the plan).  build/launch.sh runs the stage
binaries as one MPMD mpirun on this machine.  Oracle: `hetc train`, the
single-process trainer (itself checked against PyTorch in tests/train), on
the same data order and microbatching: every step's loss must agree to
1e-5 relative.

Then: kill one rank mid-run and relaunch with --resume: the loss trajectory
equals the uninterrupted run's exactly (printed digits); resume the same
checkpoints under another plan (a one-mesh cluster): training continues
where it stopped (losses vs hetc train to 1e-5).

usage: test_stages_e2e.py HETC WORKDIR
"""
import json
import os
import sys

from stagetest import DATA, StageTest, losses

STEPS = 20
# the cosine schedule decays over --steps: compile and train use STEPS + 5
# (hetc compile --steps is the stage binaries' horizon; launch.sh --steps N stops at N)
t = StageTest("tiny_hetero.yaml", horizon=STEPS + 5)
check, MB, GB = t.check, t.mb, t.gb


out = t.path("build")
p = t.compile(out, "--emit-llvm")
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    sys.exit(1)
plan = json.load(open(os.path.join(out, "plan.json")))
st = plan["stages"]
meshes = {s["mesh"] for s in st}
sizes = {s["layers"][1] - s["layers"][0] for s in st}
check(len(st) >= 3 and len(meshes) >= 3, f"want >= 3 stages on >= 3 meshes: {st}")
check(len(sizes) >= 2, "want stages of different sizes")
check(any(s["dp"] == 2 for s in st), "want a stage with DP = 2")
for k in range(len(st)):
    check(os.access(os.path.join(out, f"stage_{k}"), os.X_OK), f"no stage_{k}")
    check(os.path.exists(os.path.join(out, f"stage_{k}.ll")), f"no stage_{k}.ll (--emit-llvm)")
for f in ("launch.sh", "srun.conf", "hostfile", "init/step_00000000/MANIFEST"):
    check(os.path.exists(os.path.join(out, f)), f"no {f}")
K = plan["microbatches"]
check(K * MB == GB, "microbatches x rows = global batch")

# the reference: one process, same microbatching (K microbatches of MB rows per step)
ref_l = t.reference(STEPS + 5, accum=K)

launch = os.path.join(out, "launch.sh")
ck = t.path("ckpt")
p = t.launch(out, STEPS, "--checkpoint-dir", ck, "--checkpoint-every", "5")
full, worst = t.expect_losses(p, "pipelined run", ref_l, n=STEPS, as_text=True)
print(f"{len(full)} steps: pipelined loss == hetc train to {worst:.2g} relative "
      f"(step 1 {full.get(1)}, step {STEPS} {full.get(STEPS)})", flush=True)
check(float(full[STEPS]) < float(full[1]), "loss is not falling")

# kill one rank mid-run, then --resume
ck2 = t.path("ckpt_kill")
cmd = [launch, "--data", DATA, "--steps", str(STEPS), "--checkpoint-dir", ck2, "--checkpoint-every", "4"]
rc, seen, rest_err, killed = t.run_killing(cmd, os.path.join(out, "stage_1"), 10)
check(killed, "never saw step 10 of the run to kill")
check(rc != 0, "launch.sh exited 0 after a rank was killed")
check("launch.sh: the job failed" in rest_err, "launch.sh did not report the failed rank")
first = losses(seen, as_text=True)  # printed digits: compared exactly
p = t.run(cmd + ["--resume"])
check(p.returncode == 0, "resume after the kill failed")
resumed = losses(p.stdout, as_text=True)
check(min(resumed, default=99) in (9, 13), f"resume should start after a complete checkpoint (step 8 or 12): {sorted(resumed)[:3]}")
merged = dict(first)
merged.update(resumed)
check(all(merged.get(k) == full[k] for k in full),
      "killed + resumed trajectory differs from the uninterrupted run: " +
      str([(k, merged.get(k), full[k]) for k in full if merged.get(k) != full[k]][:5]))

# the same checkpoints under another plan: a smaller cluster (two A100s)
out2 = t.path("build_small")
p = t.compile(out2, cluster="tiny_pair.yaml")
if check(p.returncode == 0, "compile for tiny_pair.yaml failed"):
    p = t.launch(out2, STEPS + 5, "--checkpoint-dir", ck, "--resume")
    more, worst2 = t.expect_losses(p, "resumed under the smaller plan", ref_l,
                                   steps=range(STEPS + 1, STEPS + 6))
    print(f"resumed under the tiny_pair plan: steps {min(more, default=0)}..{max(more, default=0)} "
          f"== hetc train to {worst2:.2g}", flush=True)

t.finish()
