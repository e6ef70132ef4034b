"""Zorse's ministages sharing devices on the CUDA backend (issue 18).

`hetc plan --planner=zorse --precision fp32` on
examples/clusters/ministages.yaml gives gpt_tiny two groups of two
ministages (stages 0, 2 on small_a; 1, 3 on small_b), every one offloaded.
The CUDA runtime has no offload store, so the plan is compiled with
--backend=cuda without "offload" (a hand edit: the co-location is what is
tested here).  On every build: it compiles and launch.sh's device_of puts
ranks 2 and 3 on ranks 0 and 1's devices.  On a GPU: launch.sh trains 10
steps; each rank's start-up line gives its device slot (the GPU index
before % visible GPUs), ranks 2 and 3 naming and matching ranks 0 and 1;
losses vs host `hetc train` (same microbatching) to 1e-3 relative per step
(cudatest: fp32 storage, other summation orders), mean under 1.5 %.

Needs a GPU for the run: without one it prints why and exits 77 (ctest SKIP).

usage: test_cuda_ministages.py HETC WORKDIR
"""
import json
import os
import re
import sys

from cudatest import DATA, MODEL, OPT, SRC, check, failures, finish, fresh, losses, run

HETC, WORK = sys.argv[1], sys.argv[2]
SEQ, MB, GB, STEPS = 64, 4, 16, 10
FP32 = ["--precision", "fp32"]
CLUSTER = os.path.join(SRC, "examples", "clusters", "ministages.yaml")
fresh(WORK)

p = run([HETC, "plan", MODEL, CLUSTER, "--seq", str(SEQ), "--microbatch", str(MB),
         "--global-batch", str(GB), "--planner=zorse", *FP32, "-o", os.path.join(WORK, "plan")])
if not check(p is not None and p.returncode == 0, "hetc plan --planner=zorse failed"):
    finish()
plan = json.load(open(os.path.join(WORK, "plan", "plan.json")))
groups = [s.get("group", 0) for s in plan["stages"]]
check(groups == [1, 2, 1, 2], f"zorse's groups {groups}, expected two groups of two ministages")
for s in plan["stages"]:
    s.pop("offload", None)
path = os.path.join(WORK, "plan_no_offload.json")
json.dump(plan, open(path, "w"), indent=1)
rows, B = plan["global_batch"] // plan["microbatches"], plan["microbatches"]
out = os.path.join(WORK, "build")
p = run([HETC, MODEL, CLUSTER, "--backend=cuda", "--plan", path, "--seq", str(SEQ),
         "--microbatch", str(rows), "--global-batch", str(GB), "--threads", "2", "--steps",
         str(STEPS), *OPT, *FP32, "-o", out])
if not check(p is not None and p.returncode == 0, "hetc compile --backend=cuda failed"):
    finish()
sh = open(os.path.join(out, "launch.sh")).read()
check("device_of=(0 1 0 1)" in sh, "launch.sh: no device_of=(0 1 0 1)")

probe = run([os.path.join(out, "stage_0"), "--data", DATA, "--steps", "0"], timeout=120)
if probe is not None and "no CUDA device" in probe.stderr:
    if failures:  # what every build checks failed: not a skip
        finish()
    print("compiled, device_of checked; SKIP the run: no CUDA device", flush=True)
    sys.exit(77)
ref = run([HETC, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch",
           str(rows), "--accum", str(B), "--seq", str(SEQ), *OPT, *FP32, "--no-checkpoint"])
check(ref is not None and ref.returncode == 0, "hetc train failed")
ref_l = losses(ref.stdout) if ref else {}
p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
         "--checkpoint-dir", os.path.join(out, "ckpt")])
if not check(p is not None and p.returncode == 0, "launch.sh failed"):
    finish()
slot = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in re.finditer(
    r"^\[hetrt rank (\d+)\] .*device GPU (-?\d+) mod visible GPUs( \(rank \d+'s device)?",
    p.stderr, re.M)}
check(sorted(slot) == [0, 1, 2, 3], f"start-up lines of ranks {sorted(slot)}")
for r, o in ((2, 0), (3, 1)):
    if r in slot and o in slot:
        check(slot[r][0] == slot[o][0] and bool(slot[r][1]) and not slot[o][1],
              f"rank {r}: GPU slot {slot[r]}, its group mate rank {o}: {slot[o]}")
if 0 in slot and 1 in slot:
    check(slot[0][0] != slot[1][0], f"the two groups share GPU slot {slot[0][0]}")
got = losses(p.stdout)
check(len(got) == STEPS, f"{len(got)} loss lines of {STEPS}")
rels = [abs(got[k] - ref_l[k]) / max(abs(ref_l[k]), 1e-30) for k in got if k in ref_l]
worst = max(rels, default=1.0)
mean = sum(rels) / max(len(rels), 1)
check(worst <= 1e-3, f"loss vs host hetc train: max relative difference {worst:.3g}")
check(mean < 0.015, f"mean relative error {mean:.3g} >= 1.5 %")
print(f"ministages on the GPU: {len(got)} steps, slots {slot}, loss vs host: max rel "
      f"{worst:.3g}, mean rel {mean:.3g}", flush=True)
finish()
