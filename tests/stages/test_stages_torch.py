"""Stage binaries against PyTorch itself (issue 15: "every existing
equivalence still holds -- hetero pipeline, TP, ZeRO, recompute,
vocab-parallel, resume under another plan -- now against PyTorch").

The other stage tests compare launch.sh with `hetc train`; here the oracle
is tests/models/<model>.train_ref.npz: 10 AdamW steps (lr 1e-3, betas 0.9 /
0.95, weight decay 0.1 on the matrices, clip 1.0, constant schedule) of the
test model's own torch code in float64, batch 2 x seq 16 read from
examples/tiny_corpus.bin in llm.c's order (written by the test-model
script; tests/train/test_train_ref.py holds `hetc train` to the same
file).  Each plan below is compiled from the model's opset-17 ONNX export
(--precision fp32) and launched; every printed loss and pre-clip gradient
norm must equal torch's to 1e-4 relative.

GPT-2 test model (2 blocks, head tied to the embedding), 10 layers:
  pipeline     the planner's plan on tiny_hetero.yaml: 2 microbatches of
               1 row through stages on the t4, v100 and a100 meshes
  dp2-zero2-rc one stage on the two V100s: DP 2 (a row each), ZeRO-2,
               full recompute
  tp2-vocab    one stage under TP 2 on tiny_pair.yaml: blocks sharded, the
               tied table split by vocabulary rows, the loss vocab-parallel
  resume       the pipeline's step-5 checkpoint resumed under tp2-vocab:
               steps 6-10
LLaMA test model (RoPE, GQA, SwiGLU, untied head):
  tp2-3stage   the planner's tiny_hetero meshes re-cut into embedding |
               blocks | norm + head + loss, each under TP 2 (vocab-parallel
               embedding and head; compile --plan runs any dp x tp as ranks)

usage: test_stages_torch.py HETC WORKDIR
"""
import json
import os
import re
import shutil

import numpy as np

import stagetest
from stagetest import StageTest, three_stages

RTOL = 1e-4
MODELS = os.path.join(stagetest.SRC, "tests", "models")
STEP_RE = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+) \| grad norm (\S+)", re.M)


def hparams_flags(hp):
    assert hp["lr_schedule"] == "constant" and hp["batching"] == "llm.c"
    return ["--steps", str(hp["steps"]), "--lr", repr(hp["lr"]),
            "--beta1", repr(hp["betas"][0]), "--beta2", repr(hp["betas"][1]),
            "--adam-eps", repr(hp["eps"]), "--weight-decay", repr(hp["weight_decay"]),
            "--clip", repr(hp["clip"]), "--lr-schedule", "constant", "--precision", "fp32"]


def steps_of(text):
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
            for m in STEP_RE.finditer(text)}


class Torch:
    """One model's torch trajectory and the StageTest compiling it."""

    def __init__(self, t, onnx_name, ref_name):
        self.ref = np.load(os.path.join(MODELS, ref_name))
        self.hp = json.loads(str(self.ref["hparams"]))
        self.t = t
        self.model = os.path.join(MODELS, onnx_name)
        self.flags = hparams_flags(self.hp)

    def compile(self, out, cluster, mb, *extra):
        t = self.t
        t.model, t.seq, t.gb = self.model, self.hp["seq"], self.hp["batch"]
        return t.compile(out, *extra, *self.flags, cluster=cluster, mb=mb)

    def expect(self, label, p, first=1):
        """launch.sh run p: exit 0, steps first..10, losses and grad norms vs torch."""
        t, n = self.t, self.hp["steps"]
        got = steps_of(p.stdout)
        if not t.check(p.returncode == 0 and sorted(got) == list(range(first, n + 1)),
                       f"{label}: exit {p.returncode}, steps {sorted(got)}"):
            return
        wl = max(abs(got[k][0] - self.ref["traj_loss"][k - 1]) / abs(self.ref["traj_loss"][k - 1])
                 for k in got)
        wg = max(abs(got[k][1] - self.ref["traj_grad_norm"][k - 1]) /
                 abs(self.ref["traj_grad_norm"][k - 1]) for k in got)
        t.check(wl <= RTOL and wg <= RTOL, f"{label}: vs PyTorch: loss {wl:.3g}, grad norm "
                f"{wg:.3g} relative (limit {RTOL:g})")
        print(f"{label}: steps {first}-{n} == PyTorch to {wl:.2g} (loss), {wg:.2g} (grad norm)",
              flush=True)
        return got


def save(t, q, name):
    path = t.path(name)
    json.dump(q, open(path, "w"), indent=1)
    return path


t = StageTest("tiny_hetero.yaml")
check = t.check

# ------------------------------------------------------------------ GPT-2
g = Torch(t, "gpt2_op17.onnx", "gpt2.train_ref.npz")
out = t.path("gpt2_pipeline")
if not check(g.compile(out, "tiny_hetero.yaml", 1).returncode == 0, "gpt2: hetc compile"):
    t.finish()
plan = json.load(open(os.path.join(out, "plan.json")))
L = max(s["layers"][1] for s in plan["stages"])
check(len(plan["stages"]) >= 2 and len({s["mesh"] for s in plan["stages"]}) >= 2,
      f"gpt2 on tiny_hetero: {len(plan['stages'])} stages, not a heterogeneous pipeline")
ck = t.path("gpt2_ckpt")
g.expect("gpt2 pipeline (%d stages on %s)" % (len(plan["stages"]),
                                               ", ".join(s["mesh"] for s in plan["stages"])),
         t.launch(out, g.hp["steps"], "--checkpoint-dir", t.path("gpt2_ckpt_full")))
# the same plan stopped after step 5: its checkpoint is resumed below under TP 2
p = t.launch(out, 5, "--checkpoint-dir", ck)
check(p.returncode == 0, f"gpt2 pipeline, 5 steps: exit {p.returncode}")

# one stage on the two V100s: DP 2, ZeRO-2, full recompute, one microbatch of 2 rows
v = next(s for s in plan["stages"] if s["mesh"] == "v100")
q = json.loads(json.dumps(plan))
s = dict(v)
s.update(index=0, layers=[1, L], dp=2, tp=1, zero=2, recompute="full", warmup=1, delta=0,
         submesh=[1, 2])
s.pop("rows", None)
q["stages"], q["mesh_order"], q["microbatches"] = [s], ["v100"], 1
out = t.path("gpt2_dp2")
if check(g.compile(out, "tiny_hetero.yaml", 2, "--plan", save(t, q, "gpt2_dp2.json"))
         .returncode == 0, "gpt2: hetc compile (DP 2, ZeRO-2, full recompute)"):
    g.expect("gpt2 DP 2 + ZeRO-2 + full recompute", t.launch(out, g.hp["steps"]))

# one stage under TP 2 on tiny_pair: the tied table split by vocabulary rows
pp = t.path("gpt2_pair_plan")
if check(g.compile(pp, "tiny_pair.yaml", 1).returncode == 0, "gpt2: hetc compile (tiny_pair)"):
    q = json.load(open(os.path.join(pp, "plan.json")))
    big = max(q["stages"], key=lambda s: s["mem_capacity_bytes"])
    s = dict(big)
    s.update(index=0, layers=[1, L], dp=1, tp=2, zero=0, recompute="none", warmup=1, delta=0)
    q["stages"], q["mesh_order"] = [s], [s["mesh"]]
    out = t.path("gpt2_tp2")
    if check(g.compile(out, "tiny_pair.yaml", 1, "--plan", save(t, q, "gpt2_tp2.json"))
             .returncode == 0, "gpt2: hetc compile (one stage, TP 2)"):
        sh = [r for r in stagetest.config_lines(os.path.join(out, "stage_0"), "tpshard")
              if r.split()[1] == "wte.weight"]
        check(sh and sh[0].split()[3] == "0", f"gpt2 TP 2: wte.weight not split by vocabulary "
              f"rows: {sh}")
        g.expect("gpt2 one stage, TP 2, vocab-parallel", t.launch(out, g.hp["steps"]))
        # the pipeline's step-5 checkpoint (layer files, unsharded) under TP 2
        copy = t.path("gpt2_ckpt_tp2")
        shutil.copytree(ck, copy)
        g.expect("gpt2 pipeline step 5 resumed under TP 2",
                 t.launch(out, g.hp["steps"], "--checkpoint-dir", copy, "--resume"), first=6)

# ------------------------------------------------------------------ LLaMA
m = Torch(t, "llama_op17.onnx", "llama.train_ref.npz")
pp = t.path("llama_plan")
if check(m.compile(pp, "tiny_hetero.yaml", 1).returncode == 0, "llama: hetc compile"):
    q = three_stages(json.load(open(os.path.join(pp, "plan.json"))), (2, 2, 2))
    out = t.path("llama_tp2")
    if check(m.compile(out, "tiny_hetero.yaml", 1, "--plan", save(t, q, "llama_tp2.json"))
             .returncode == 0, "llama: hetc compile (three stages, TP 2)"):
        m.expect("llama embedding | blocks | head, each TP 2", t.launch(out, m.hp["steps"]))
t.finish()
