"""Tensor parallelism of a LLaMA in stage binaries (issue 9).

tests/models/llama_op17.onnx (2 layers: RMSNorm, rotary attention with GQA,
n_head 4 / n_kv_head 2, SwiGLU MLP; vocab 256, so the byte-level
examples/tiny_corpus.bin fits) on examples/clusters/three_mesh.yaml with a
hand-edited plan.json (hetc compile --plan FILE): stage 0 the embedding,
stage 1 both blocks under TP = 2, stage 2 the final norm, head and loss.
Each block's attention (q/k/v column-parallel over the kv heads, out
row-parallel) and SwiGLU MLP (gate and up column-parallel, down
row-parallel) must be sharded: stage_1's tpshard records name every block
weight with its split axis.  Oracle: `hetc train`, the single-process
trainer, on the same data order and microbatching: 10 steps' losses equal
to 1e-5 relative.  Then the TP run's final checkpoint (stored unsharded)
resumes under the same plan with TP = 1: step 11's loss equals hetc
train's to 1e-5.

usage: test_stages_tp_llama.py HETC WORKDIR
"""
import json
import os
import re
import sys

import stagetest
from stagetest import StageTest, config_lines, three_stages

STEPS = 10
LLAMA = os.path.join(stagetest.SRC, "tests", "models", "llama_op17.onnx")
META = json.load(open(os.path.join(stagetest.SRC, "tests", "models", "llama.json")))
# the StageTest helpers compile and train stagetest.MODEL
stagetest.MODEL = LLAMA
t = StageTest("three_mesh.yaml", seq=16, mb=2, gb=4, horizon=STEPS + 1)
check = t.check

# the planner's plan.json, as the template of the hand-edited plans
plan = t.plan(t.path("planned"))
if plan is None:
    sys.exit(1)
L = max(s["layers"][1] for s in plan["stages"])
meshes = sorted({s["mesh"] for s in plan["stages"]})
check(len(meshes) == 3, f"the plan uses meshes {meshes} (want 3)")


def plan_with(tp):
    """three stages: embedding | both blocks under tp | norm, head, loss"""
    path = t.path(f"plan_tp{tp}.json")
    json.dump(three_stages(plan, (1, tp, 1)), open(path, "w"), indent=1)
    return path


builds = {}
for tp in (1, 2):
    builds[tp] = t.path(f"build_tp{tp}")
    p = t.compile(builds[tp], "--plan", plan_with(tp))
    if not check(p.returncode == 0, f"hetc compile --plan (TP {tp}) exit {p.returncode}"):
        sys.exit(1)

# every block weight is sharded in stage 1, along the Megatron axis: the
# exporter stores MatMul weights [in, out], so column-parallel = axis 1
inits = META["initializers"]["llama_op17.onnx"]
want = {}
for onnx_name, v in inits.items():
    m = re.match(r"layers\.\d+\.(attention\.w[qkvo]|feed_forward\.w[123])\.weight$", v["param"])
    if m:
        row = m.group(1) in ("attention.wo", "feed_forward.w2")
        want[onnx_name] = 0 if row else 1
check(len(want) == 7 * META["n_layer"], f"{len(want)} block weights in llama.json")
shards = {}
for rec in config_lines(os.path.join(builds[2], "stage_1"), "tpshard"):
    f = rec.split()
    if len(f) >= 4 and f[2] == "axis":
        shards[f[1]] = int(f[3])
for name, axis in want.items():
    check(shards.get(name) == axis, f"stage_1: '{name}' sharded on axis {shards.get(name)} "
          f"(want {axis})")
tp_rec = config_lines(os.path.join(builds[2], "stage_1"), "tp")
check(any(r.split()[1:4] == ["1", "2", "1"] for r in tp_rec), f"stage_1: tp records {tp_rec}")
print(f"stage 1 (layers 2-{L - 1}): {len(want)} block weights sharded over TP 2 "
      f"(q/k/v, gate/up column-parallel; o, down row-parallel)", flush=True)

ref_l = t.reference(STEPS + 1)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = t.path("ckpt")
t.expect_run(builds[2], STEPS, ref_l, "TP 2 run", "--checkpoint-dir", ck)

# the checkpoint is unsharded: it resumes under TP = 1
t.expect_resume(builds[1], ck, t.path("ckpt_tp1"), STEPS + 1, ref_l, "TP 1")

t.finish()
