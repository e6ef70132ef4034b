"""Vocabulary-parallel embedding and LM head + loss in stage binaries
(issue 9; passes/tp_shard_vocab.c).

1. The example GPT (examples/gpt_tiny.onnx, head tied to the embedding) on
   examples/clusters/tiny_pair.yaml with a hand-edited plan.json: ONE stage
   holding every layer under TP = 2, so the tied table wte is sharded by
   vocabulary rows (tpshard 'wte.weight' axis 0), the embedding all-reduced
   and the loss vocab-parallel (TpAllReduce max + sum).  20 steps' losses
   == `hetc train` (single process, same data order and microbatching) to
   1e-5 relative.  The final checkpoint (stored unsharded) resumes under
   other TP splits: the planner's two TP = 1 stages, and two TP = 2 stages
   (the tie then spans the stages: wte replicated): step 21's loss ==
   hetc train's.
2. The LLaMA of tests/models (untied head, vocab 256) on three_mesh.yaml:
   stage 0 the embedding alone under TP = 2 (its only pattern), stage 1
   the blocks (TP = 1), stage 2 the final norm, head and loss under TP = 2:
   embedding and head sharded on different stages.  10 steps == hetc train
   to 1e-5; the checkpoint resumes under the same stages at TP = 1.

usage: test_stages_vocab.py HETC WORKDIR
"""
import json
import os

import stagetest
from stagetest import StageTest, config_lines, three_stages


def shards_of(binary):
    """tpshard records: name -> (axis, full extent)"""
    out = {}
    for rec in config_lines(binary, "tpshard"):
        f = rec.split()
        if len(f) >= 6 and f[2] == "axis" and f[4] == "full":
            out[f[1]] = (int(f[3]), int(f[5]))
    return out


def binary_text(binary):
    return open(binary, "rb").read()


# ---------------------------------------------------------------- 1. gpt_tiny, tied
STEPS = 20
t = StageTest("tiny_pair.yaml", horizon=STEPS + 1)
check = t.check

out1 = t.path("build_tp1")
plan = t.planned(out1)
if plan is None:
    t.finish()
L = max(s["layers"][1] for s in plan["stages"])


def save(q, name):
    path = t.path(name)
    json.dump(q, open(path, "w"), indent=1)
    return path


# one stage, every layer, TP 2 (on the larger mesh)
q = json.loads(json.dumps(plan))
big = max(q["stages"], key=lambda s: s["mem_capacity_bytes"])
s = dict(big)
s.update(index=0, layers=[1, L], dp=1, tp=2, zero=0, recompute="none", warmup=1, delta=0)
q["stages"] = [s]
q["mesh_order"] = [s["mesh"]]
out_one = t.path("build_one_tp2")
p = t.compile(out_one, "--plan", save(q, "plan_one_tp2.json"))
if not check(p.returncode == 0, f"hetc compile --plan (one stage, TP 2) exit {p.returncode}"):
    t.finish()
b0 = os.path.join(out_one, "stage_0")
sh = shards_of(b0)
check(sh.get("wte.weight") == (0, 512), f"stage_0: wte.weight not sharded by vocabulary rows "
      f"({sh.get('wte.weight')})")
text = binary_text(b0)
check(b"VocabCrossEntropy(" in text and b"VocabCeStats(" in text and b'op="max"' in text,
      "stage_0: no vocab-parallel loss (VocabCeStats, VocabCrossEntropy, TpAllReduce max) "
      "in its train graph")
print(f"one stage under TP 2: {len(sh)} tpshard records, wte.weight split by vocabulary rows; "
      f"embedding, head and loss vocab-parallel", flush=True)

# two stages under TP 2: the tie spans them, wte stays replicated
q2 = json.loads(json.dumps(plan))
check(len(q2["stages"]) == 2, f"tiny_pair plan has {len(q2['stages'])} stages (want 2)")
a, b = q2["stages"]
a.update(layers=[1, L // 2], dp=1, tp=2, warmup=2)
b.update(layers=[L // 2 + 1, L], dp=1, tp=2, warmup=1)
out_two = t.path("build_two_tp2")
p = t.compile(out_two, "--plan", save(q2, "plan_two_tp2.json"))
if not check(p.returncode == 0, f"hetc compile --plan (two stages, TP 2) exit {p.returncode}"):
    t.finish()
for k in range(2):
    sk = shards_of(os.path.join(out_two, f"stage_{k}"))
    check("wte.weight" not in sk, f"two stages: stage_{k} shards the tied wte.weight")

ref_l = t.reference(STEPS + 1)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = t.path("ckpt")
t.expect_run(out_one, STEPS, ref_l, "one stage TP 2", "--checkpoint-dir", ck)

for name, out in (("two stages TP 1", out1), ("two stages TP 2", out_two),
                  ("one stage TP 2", out_one)):
    t.expect_resume(out, ck, t.path("ckpt_" + name.replace(" ", "_")), STEPS + 1, ref_l, name)

# ---------------------------------------------------------------- 2. LLaMA, untied
LSTEPS = 10
LLAMA = os.path.join(stagetest.SRC, "tests", "models", "llama_op17.onnx")
# the same StageTest, now on the LLaMA (its helpers compile and train t.model,
# or stagetest.MODEL), its outputs under WORK/llama
stagetest.MODEL = t.model = LLAMA
t.cluster, t.seq, t.mb, t.gb, t.horizon = "three_mesh.yaml", 16, 2, 4, LSTEPS + 1
u = t
os.makedirs(t.path("llama"))
lplan = u.plan(u.path("llama", "planned"), "hetc plan (llama)")
if lplan is None:
    t.finish()
meshes = sorted({s["mesh"] for s in lplan["stages"]})
check(len(meshes) == 3, f"the llama plan uses meshes {meshes} (want 3)")


def llama_plan(tp):
    """embedding (tp) | the blocks (TP 1) | norm, head, loss (tp)"""
    return u.path("llama", f"plan_tp{tp}.json"), three_stages(lplan, (tp, 1, tp))


lbuilds = {}
for tp in (1, 2):
    path, q = llama_plan(tp)
    json.dump(q, open(path, "w"), indent=1)
    lbuilds[tp] = u.path("llama", f"build_tp{tp}")
    p = u.compile(lbuilds[tp], "--plan", path)
    if not check(p.returncode == 0, f"hetc compile --plan (llama, TP {tp}) exit {p.returncode}"):
        t.finish()
s0 = shards_of(os.path.join(lbuilds[2], "stage_0"))
s2 = shards_of(os.path.join(lbuilds[2], "stage_2"))
check(s0.get("tok_embeddings.weight") == (0, 256),
      f"llama stage_0: embedding not sharded by vocabulary rows: {s0}")
head = [n for n, (ax, full) in s2.items() if ax == 1 and full == 256]
check(len(head) == 1, f"llama stage_2: the head weight not sharded by vocabulary columns: {s2}")
check(b"VocabCrossEntropy(" in binary_text(os.path.join(lbuilds[2], "stage_2")),
      "llama stage_2: no vocab-parallel loss")
print(f"llama: embedding (stage 0) and head {head} + loss (stage 2) vocab-parallel under TP 2",
      flush=True)

lref = u.reference(LSTEPS + 1)
check(len(lref) == LSTEPS + 1, f"hetc train (llama) printed {len(lref)} steps")
lck = u.path("llama", "ckpt")
u.expect_run(lbuilds[2], LSTEPS, lref, "llama TP 2 run", "--checkpoint-dir", lck,
             shown="llama embedding + head TP 2", falling="llama loss is not falling")
u.expect_resume(lbuilds[1], lck, u.path("llama", "ckpt_tp1"), LSTEPS + 1, lref, "TP 1",
                prefix="llama ")

t.finish()
