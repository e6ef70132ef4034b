"""Zorse's ministages sharing devices (issue 18, seed 000 §4).

`hetc plan --planner=zorse --precision fp32` on
examples/clusters/ministages.yaml (two single-GPU meshes whose devices hold
barely more than the planner's runtime reserve) with examples/gpt_tiny.onnx
(seq 64, microbatch 4, global batch 16) cuts each GPU group's layers into
several ministages placed round-robin: plan.json stages with the same
"group" share that group's devices, every one offloaded to the host.

- the plan has a group of more than one ministage (else the cluster no
  longer forces the form this test is about) and `hetc plan` calls it
  runnable;
- `hetc --plan plan.json` compiles it; stages.txt states each group's
  arenas summed on its device (the memory table's arena column summed over
  the group); launch.sh's device_of gives each
  rank of a group's later ministage its first ministage's rank, rank for
  rank, computed here from plan.json alone (world ranks stage by stage,
  DP rank x TP);
- launch.sh runs every ministage as its own ranks: each rank's start-up
  line says the device slot it runs on, equal to its group mate's (the
  device a CUDA rank selects is that slot modulo the visible GPUs), and
  the groups' slots differ (launched with a stale HETRT_DEVICE_OF in the
  environment, which launch.sh replaces);
- 10 steps equal `hetc train` on the same global batch and microbatching
  (the plan's rows per microbatch, accum = microbatches) to 1e-5;
- the same cluster with memory_gb 1.004: zorse makes one group of both
  meshes (a DP group over two meshes, "parts") with six ministages; it
  compiles and device_of matches plan.json (compile only: 12 ranks are too
  many for the CI machine's cores);
- refusals: a group whose ministages are placed differently (dp) names both
  stages; a "group" that is no whole number names the key; a group on two
  pipelines whose stages do not line up names each such stage's "group".

usage: test_stages_ministages.py HETC WORKDIR
"""
import json
import os
import re

from stagetest import StageTest, losses, stages_txt, CLUSTERS, MODEL, DATA, OPT

STEPS = 10
CLUSTER = "ministages.yaml"
FP32 = ["--precision", "fp32"]
t = StageTest(CLUSTER, horizon=STEPS)
check = t.check


def zorse(cluster, out):
    p = t.run([t.hetc, "plan", MODEL, cluster, "--seq", str(t.seq), "--microbatch", str(t.mb),
               "--global-batch", str(t.gb), "--planner=zorse", *FP32, "-o", out])
    check(p.returncode == 0, f"hetc plan --planner=zorse on {cluster}: exit {p.returncode}")
    path = os.path.join(out, "plan.json")
    return (json.load(open(path)) if os.path.exists(path) else None), p


def groups(plan):
    """group -> its stages' indices, in order."""
    g = {}
    for k, s in enumerate(plan["stages"]):
        if s.get("group", 0) > 0:
            g.setdefault(s["group"], []).append(k)
    return g


def want_device_of(plan):
    """Each world rank's device owner from plan.json: a stage's ranks
    (dp x tp) follow the stages before it; rank r of a group's later
    ministage uses rank r of the group's first ministage."""
    base, first, out = [], {}, []
    n = 0
    for k, s in enumerate(plan["stages"]):
        base.append(n)
        n += s["dp"] * s["tp"]
    for k, s in enumerate(plan["stages"]):
        g = s.get("group", 0)
        m = first.setdefault(g, k) if g > 0 else k
        out += [base[m] + r for r in range(s["dp"] * s["tp"])]
    return out


def device_of(out):
    sh = open(os.path.join(out, "launch.sh")).read()
    m = re.search(r"^device_of=\(([^)]*)\)", sh, re.M)
    return [int(x) for x in m.group(1).split()] if m else None


def compile_plan(plan, out, path=None, quiet=False):
    rows = plan["global_batch"] // plan["microbatches"]
    if path is None:
        path = out + ".json"
        json.dump(plan, open(path, "w"), indent=1)
    return t.compile(out, "--plan", path, *FP32, mb=rows, quiet=quiet)


plan, pp = zorse(os.path.join(CLUSTERS, CLUSTER), t.path("plan"))
if plan is None:
    t.finish()
gs = groups(plan)
big = {g: ks for g, ks in gs.items() if len(ks) > 1}
check(len(big) >= 1, f"zorse on {CLUSTER}: no group of several ministages ({gs}): the "
      f"cluster no longer forces ministages")
check(all(s.get("offload") for s in plan["stages"]), "zorse's ministages are not all offloaded")
check("cannot run it yet" not in pp.stderr, f"hetc plan calls the plan unrunnable: "
      f"{pp.stderr.strip()[-300:]}")
print(f"zorse on {CLUSTER}: {len(plan['stages'])} ministages, groups {gs}, "
      f"{plan['microbatches']} microbatches x {plan['global_batch'] // plan['microbatches']} rows",
      flush=True)

out = t.path("build")
c = compile_plan(plan, out, path=t.path("plan", "plan.json"))
if check(c.returncode == 0, f"the ministage plan: hetc compile exit {c.returncode}"):
    want = want_device_of(plan)
    got = device_of(out)
    check(got == want, f"launch.sh device_of {got}, plan.json gives {want}")
    # stages.txt: each group's device holds every ministage's arena (the sum
    # of the table's arena column over the group)
    tab, txt = stages_txt(out), open(os.path.join(out, "stages.txt")).read()
    for g, ks in big.items():
        m = re.search(rf"^group {g}: stages {' '.join(map(str, ks))} share stage {ks[0]}'s "
                      rf"devices .*?arenas sum to (\S+) MiB", txt, re.M)
        arena = sum(float(tab[k][8]) for k in ks if k in tab)
        check(m and abs(float(m.group(1)) - arena) <= 0.011 * len(ks),
              f"stages.txt: group {g}'s arena sum {m.group(1) if m else None}, the table's "
              f"arenas sum to {arena:.2f} MiB")
    rows, B = plan["global_batch"] // plan["microbatches"], plan["microbatches"]
    ref_run = t.run([t.hetc, "train", MODEL, "--data", DATA, "--steps", str(STEPS),
                     "--microbatch", str(rows), "--accum", str(B), "--seq", str(t.seq), *OPT,
                     *FP32, "--no-checkpoint"])
    check(ref_run.returncode == 0, "hetc train failed")
    ref = losses(ref_run.stdout)
    # a stale HETRT_DEVICE_OF in the caller's environment (every rank on
    # rank 3's device) must not reach the ranks: launch.sh sets its own
    pr = t.launch(out, STEPS, env=dict(os.environ, HETRT_DEVICE_OF="3 3 3 3"))
    got_l, w = t.expect_losses(pr, "ministages", ref, n=STEPS)
    print(f"ministages: {STEPS} steps == hetc train to {w:.2g} relative (step 1 "
          f"{got_l.get(1)}, step {STEPS} {got_l.get(STEPS)})", flush=True)
    # each rank's device slot (its start-up line) is its group mate's
    slot = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r"^\[hetrt rank (\d+)\] .*device slot (-?\d+)( \(rank \d+'s device)?", pr.stderr, re.M)}
    check(sorted(slot) == list(range(len(want))), f"start-up lines of ranks {sorted(slot)}, "
          f"{len(want)} ranks")
    for r, o in enumerate(want):
        if r in slot and o in slot:
            check(slot[r][0] == slot[o][0] and slot[r][0] >= 0,
                  f"rank {r} runs on device slot {slot[r][0]}, its group mate rank {o} on "
                  f"{slot[o][0]}")
            check(bool(slot[r][1]) == (r != o), f"rank {r}: start-up line says "
                  f"{'no ' if r != o else ''}shared device")
    owners = sorted({slot[o][0] for o in set(want) if o in slot})
    check(owners == list(range(len(set(want)))), f"the groups' device slots {owners}: one "
          f"device each")

# one group of both meshes, six ministages with parts: compile and device_of
with open(os.path.join(CLUSTERS, CLUSTER)) as f:
    y = f.read().replace("memory_gb: 1.01", "memory_gb: 1.004")
one = t.path("one_group.yaml")
open(one, "w").write(y)
plan1, _ = zorse(one, t.path("plan_one"))
if plan1 is not None:
    gs1 = groups(plan1)
    multi = [s for s in plan1["stages"] if len(s.get("parts", [])) > 1]
    check(len(gs1) == 1 and len(next(iter(gs1.values()))) == len(plan1["stages"]) > 2 and
          len(multi) == len(plan1["stages"]) and plan1["stages"][0]["dp"] > 1,
          f"memory_gb 1.004: zorse's groups {gs1}, {len(multi)} stages with parts, dp "
          f"{plan1['stages'][0]['dp']}: not one DP group of several ministages over both meshes")
    out1 = t.path("build_one")
    c = t.compile(out1, "--plan", t.path("plan_one", "plan.json"), *FP32, cluster=one,
                  mb=plan1["global_batch"] // plan1["microbatches"])
    if check(c.returncode == 0, f"one group: hetc compile exit {c.returncode}"):
        want1 = want_device_of(plan1)
        check(device_of(out1) == want1, f"one group: device_of {device_of(out1)}, plan.json "
              f"gives {want1}")
        print(f"one group of {len(plan1['stages'])} ministages x dp {plan1['stages'][0]['dp']}: "
              f"compiled, device_of {want1}", flush=True)

# refusals, named
bad = json.loads(json.dumps(plan))
g, ks = next(iter(big.items()), (1, [0, 2]))
if len(ks) > 1:
    bad["stages"][ks[1]]["dp"] = 2
    bad["stages"][ks[1]].pop("rows", None)
    p = compile_plan(bad, t.path("build_bad_dp"), quiet=True)
    want = (f'stages[{ks[1]}] ("group" {g}) is placed unlike stages[{ks[0]}], the group\'s '
            f'first ministage')
    check(p.returncode in (1, 2) and want in p.stderr and "Traceback" not in p.stderr,
          f"a group placed unlike: exit {p.returncode}, {p.stderr.strip()[-300:]}")
bad = json.loads(json.dumps(plan))
bad["stages"][0]["group"] = "one"
p = compile_plan(bad, t.path("build_bad_key"), quiet=True)
check(p.returncode in (1, 2) and 'stages[0]."group" must be a whole number' in p.stderr,
      f'"group": "one": exit {p.returncode}, {p.stderr.strip()[-300:]}')
# a group inside two pipelines whose stages do not line up (cut after
# layer 9 and after layer 4; no ZeRO or offload left): refused by key
two = json.loads(json.dumps(plan))
top = max(st["layers"][1] for st in plan["stages"])
st0 = {k: v for k, v in plan["stages"][0].items() if k not in ("rows", "offload", "group")}
two["stages"] = []
for pipe, cut in ((1, 9), (2, 4)):
    for k, lay in enumerate(([1, cut], [cut + 1, top])):
        st = dict(st0, pipe=pipe, pipe_microbatches=plan["microbatches"], layers=lay, zero=0,
                  mesh=plan["stages"][k]["mesh"], device=plan["stages"][k]["device"])
        if k == 0:
            st["group"] = 1
        two["stages"].append(st)
p = compile_plan(two, t.path("build_bad_pipes"), quiet=True)
check(p.returncode in (1, 2) and 'stage 0 (pipeline 1) "group" 1' in p.stderr and
      'stage 2 (pipeline 2) "group" 1' in p.stderr,
      f"a group on unaligned pipelines: exit {p.returncode}, {p.stderr.strip()[-400:]}")
t.finish()
