"""CPU offload of a stage's parameters and optimizer state (issue 18 item 4,
Zorse: seed 000).

`hetc plan --planner=zorse` on examples/clusters/uneven_dp.yaml (three V100s
beside a T4) with examples/gpt_tiny.onnx (seq 64, microbatch 4, global batch
16) writes a plan whose two stages both say "offload": true (the second a
DP = 3 group over 8 rows, ZeRO-2).  Each offloaded stage keeps its
parameters and AdamW moments in a host store apart from the arena,
streams them in every step and writes them back after the update; the
arena's copies are NaN in between (runtime/stage/stage_offload.c), so a
read the streaming missed would show in the loss.

- the plan compiles (the refusal is gone) and its configs carry `offload 1`;
- 10 steps equal the same plan without "offload" bit for bit (the printed
  losses and gradient norms as text) and `hetc train` on the same
  microbatching to 1e-5;
- HETRT_VERBOSE: each stage's store holds 4 B per parameter of its `param`
  records plus the AdamW state (2 x the `zslice` lengths under ZeRO, else
  2 x numel), and every step copies exactly the store in and out;
- checkpoints come from the store: a run stopped at step 5 and resumed
  (offloaded) equals the uninterrupted run from step 6 on, bit for bit, and
  so does the same step-5 checkpoint resumed by the plan without offload;
- SGD with momentum (the buffer as the store's only state) vs hetc train;
- TP 2 and DP 2 x TP 2 with ZeRO-1 on tiny_pair.yaml, offloaded: 6 steps bit
  for bit without offload, and its step-3 checkpoint (TP slices and ZeRO
  states gathered from the store) resumes without offload bit for bit;
- "offload": "yes" is refused naming the key, and --backend=cuda refuses
  an offloaded plan (the host backend only).

usage: test_stages_offload.py HETC WORKDIR
"""
import json
import os
import re
import shutil

from stagetest import StageTest, losses, worst_rel, config_lines, CLUSTERS, MODEL, DATA, OPT

STEPS = 10
CLUSTER = "uneven_dp.yaml"
t = StageTest(CLUSTER, horizon=STEPS)
check = t.check


def norms_text(text):
    return {int(m.group(1)): m.group(2) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", text, re.M)}


p = t.run([t.hetc, "plan", MODEL, os.path.join(CLUSTERS, CLUSTER), "--seq", str(t.seq),
           "--microbatch", str(t.mb), "--global-batch", str(t.gb), "--planner=zorse",
           "-o", t.path("plan")])
check(p.returncode == 0, f"hetc plan --planner=zorse exit {p.returncode}")
plan = json.load(open(t.path("plan", "plan.json")))
offl = [k for k, s in enumerate(plan["stages"]) if s.get("offload")]
check(len(offl) == len(plan["stages"]), f"zorse's plan offloads stages {offl} only")
rows, B = plan["global_batch"] // plan["microbatches"], plan["microbatches"]

# the same plan without offload: the bit-for-bit reference
plain = json.loads(json.dumps(plan))
for s in plain["stages"]:
    s.pop("offload", None)
json.dump(plain, open(t.path("plain.json"), "w"), indent=1)

out, pout = t.path("build_offload"), t.path("build_plain")
c1 = t.compile(out, "--plan", t.path("plan", "plan.json"), mb=rows)
c2 = t.compile(pout, "--plan", t.path("plain.json"), mb=rows)
check(c1.returncode == 0, f"the offloaded plan: hetc compile exit {c1.returncode}")
check(c2.returncode == 0, f"the plan without offload: hetc compile exit {c2.returncode}")
for k in range(len(plan["stages"])):
    check(config_lines(os.path.join(out, f"stage_{k}"), "offload") == ["offload 1"],
          f"stage_{k} has no 'offload 1' record")
    check(config_lines(os.path.join(pout, f"stage_{k}"), "offload") == [],
          f"stage_{k} of the plan without offload has an offload record")
check("offload: host store" in open(os.path.join(out, "stages.txt")).read(),
      "stages.txt does not state the offload store")

ref_run = t.train(STEPS, mb=rows, accum=B)
check(ref_run.returncode == 0, "hetc train failed")
ref = losses(ref_run.stdout)

env = dict(os.environ, HETRT_VERBOSE="1")
po = t.launch(out, STEPS, "--checkpoint-dir", t.path("ck_off"), env=env)
got, w = t.expect_losses(po, "offloaded", ref, n=STEPS)
pp = t.launch(pout, STEPS, "--checkpoint-dir", t.path("ck_plain"))
base, wp = t.expect_losses(pp, "without offload", ref, n=STEPS)
same = losses(po.stdout, True) == losses(pp.stdout, True) and \
    norms_text(po.stdout) == norms_text(pp.stdout)
check(same and len(got) == STEPS, "offloaded losses / grad norms differ from the plan without "
      "offload")
print(f"offloaded: {STEPS} steps == without offload bit for bit ({same}), == hetc train to "
      f"{w:.2g} relative (without offload {wp:.2g})", flush=True)

# the store's accounting against the compiler's records
for k in range(len(plan["stages"])):
    exe = os.path.join(out, f"stage_{k}")
    numel = {r.split()[1]: int(r.split()[r.split().index("numel") + 1])
             for r in config_lines(exe, "param")}
    zl = {r.split()[1]: int(r.split()[3]) for r in config_lines(exe, "zslice")}
    pbytes = 4 * sum(numel.values())
    obytes = 4 * 2 * sum(zl.get(n, v) for n, v in numel.items())
    m = re.search(rf"stage {k} offload: host store (\d+) bytes \(parameters (\d+), optimizer "
                  rf"state (\d+)\)", po.stderr)
    check(m is not None and (int(m.group(2)), int(m.group(3))) == (pbytes, obytes)
          and int(m.group(1)) == pbytes + obytes,
          f"stage {k}: the store line {m.group(0) if m else None!r}; the records give "
          f"{pbytes} + {obytes} bytes")
    steps = re.findall(rf"stage {k} offload step (\d+): (\d+) bytes in, (\d+) bytes out",
                       po.stderr)
    check(len(steps) == STEPS and all(int(i) == int(o) == pbytes + obytes for _, i, o in steps),
          f"stage {k}: per-step offload lines {steps[:3]}... (want {STEPS} x "
          f"{pbytes + obytes} in and out)")
    print(f"stage {k}: store {pbytes} + {obytes} bytes, {len(steps)} steps of "
          f"{pbytes + obytes} bytes in and out", flush=True)

# checkpoints: from the store, resumed offloaded and not
pr = t.launch(out, 5, "--checkpoint-dir", t.path("ck_half"), "--checkpoint-every", "5")
check(pr.returncode == 0, f"the 5-step offloaded run: exit {pr.returncode}")
shutil.copytree(t.path("ck_half"), t.path("ck_half_plain"))
rr = t.launch(out, STEPS, "--checkpoint-dir", t.path("ck_half"), "--resume")
rp = t.launch(pout, STEPS, "--checkpoint-dir", t.path("ck_half_plain"), "--resume")
want = {k: v for k, v in losses(po.stdout, True).items() if k > 5}
for label, r in (("resumed offloaded", rr), ("resumed without offload", rp)):
    check(r.returncode == 0, f"{label}: exit {r.returncode}")
    check(losses(r.stdout, True) == want, f"{label}: steps 6..{STEPS} "
          f"{losses(r.stdout, True)} != the uninterrupted run's {want}")
print(f"step-5 checkpoint resumed offloaded and without offload: steps 6..{STEPS} equal the "
      f"uninterrupted run bit for bit", flush=True)

# SGD with momentum: the store holds the momentum buffer as its state
sgd = ["--optimizer", "sgd", "--momentum", "0.9", "--lr", "0.05"]
so = t.path("build_sgd")
cs = t.compile(so, "--plan", t.path("plan", "plan.json"), *sgd, mb=rows)
if check(cs.returncode == 0, f"SGD: hetc compile exit {cs.returncode}"):
    sr = t.run([t.hetc, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch",
                str(rows), "--accum", str(B), "--seq", str(t.seq), *OPT, *sgd, "--no-checkpoint"])
    check(sr.returncode == 0, "hetc train (SGD) failed")
    t.expect_run(so, STEPS, losses(sr.stdout), "offloaded, SGD momentum 0.9")

# TP and ZeRO-1 under offload (tiny_pair.yaml, as test_stages_tp.py): stage 0
# TP 2, stage 1 DP 2 x TP 2 with ZeRO-1, both offloaded: checkpoints gather
# the TP slices and ZeRO states from the store
tp1 = t.path("build_pair")
c = t.compile(tp1, cluster="tiny_pair.yaml", steps=6)
if check(c.returncode == 0, f"tiny_pair: hetc compile exit {c.returncode}"):
    q = json.load(open(os.path.join(tp1, "plan.json")))
    s0, s1 = dict(q["stages"][0]), dict(q["stages"][-1])
    s0.update(layers=[1, 9], dp=1, tp=2, warmup=2, zero=0, offload=True)
    s1.update(layers=[10, 18], dp=2, tp=2, warmup=1, zero=1, offload=True)
    q["stages"] = [s0, s1]
    json.dump(q, open(t.path("pair_off.json"), "w"), indent=1)
    for s in q["stages"]:
        s.pop("offload")
    json.dump(q, open(t.path("pair_plain.json"), "w"), indent=1)
    to, tpl = t.path("build_pair_off"), t.path("build_pair_plain")
    ok = t.compile(to, "--plan", t.path("pair_off.json"), cluster="tiny_pair.yaml",
                   steps=6).returncode == 0
    ok &= t.compile(tpl, "--plan", t.path("pair_plain.json"), cluster="tiny_pair.yaml",
                    steps=6).returncode == 0
    if check(ok, "tiny_pair TP plans with and without offload: hetc compile failed"):
        a1 = t.launch(to, 6, "--checkpoint-dir", t.path("ck_pair_off"), "--checkpoint-every", "3")
        a2 = t.launch(tpl, 6, "--checkpoint-dir", t.path("ck_pair_plain"))
        la, lb = losses(a1.stdout, True), losses(a2.stdout, True)
        check(a1.returncode == 0 and a2.returncode == 0 and len(la) == 6 and la == lb,
              f"TP + ZeRO-1 offloaded {la} != without offload {lb}")
        shutil.rmtree(os.path.join(t.path("ck_pair_off"), "step_00000006"))
        r3 = t.launch(tpl, 6, "--checkpoint-dir", t.path("ck_pair_off"), "--resume")
        check(r3.returncode == 0 and losses(r3.stdout, True) == {k: v for k, v in lb.items()
                                                                 if k > 3},
              f"the offloaded TP run's step-3 checkpoint resumed without offload: "
              f"{losses(r3.stdout, True)}")
        print(f"TP 2 + DP 2 x TP 2 ZeRO-1, offloaded: 6 steps bit for bit without offload "
              f"({la == lb}); its step-3 checkpoint resumes without offload", flush=True)

# a value that is neither true nor false
bad = json.loads(json.dumps(plan))
bad["stages"][0]["offload"] = "yes"
json.dump(bad, open(t.path("bad.json"), "w"), indent=1)
b = t.compile(t.path("build_bad"), "--plan", t.path("bad.json"), mb=rows, quiet=True)
check(b.returncode != 0 and 'stages[0]."offload" must be true or false' in b.stderr
      and "Traceback" not in b.stderr, f"offload 'yes': exit {b.returncode}: {b.stderr[-300:]}")
# the CUDA runtime has no offload store: --backend=cuda refuses the plan (or, in a
# hetc built without CUDA, the backend itself)
cu = t.compile(t.path("build_cuda"), "--plan", t.path("plan", "plan.json"), "--backend=cuda",
               mb=rows, quiet=True)
check(cu.returncode != 0 and "Traceback" not in cu.stderr and
      ('"offload" (CPU offload) runs on the host backend only' in cu.stderr or
       "this hetc was built without" in cu.stderr),
      f"offload with --backend=cuda: exit {cu.returncode}: {cu.stderr[-300:]}")
check(not os.path.exists(os.path.join(t.path("build_cuda"), "stage_0")),
      "offload with --backend=cuda wrote stage binaries")
t.finish()
