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
3. (issue 18) gpt_tiny (tied) on three_mesh.yaml with the embedding alone
   and the head + loss alone under TP = 2: nothing to shard (the tied table
   is sharded only by a stage holding both ends), so both run replicated on
   their TP ranks; 20 steps' losses == hetc train to 1e-5 and the printed
   gradient norms to 5e-5 (a replicated parameter counted once).

usage: test_stages_vocab.py HETC WORKDIR
"""
import json
import os
import re

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


def stage_calls(build, stage):
    """The callees stage_K.ll calls (hetc compile --emit-llvm): the binary
    carries no IR text, its nodes are these calls (docs/CODEGEN.md)."""
    ll = open(os.path.join(build, "stage_%d.ll" % stage)).read()
    return set(re.findall(r"call i32 @(\w+)\(", ll))


# the direct calls of the vocabulary-parallel loss's ops (codegen/lower_node_train.c):
# VocabCeStats, VocabCrossEntropy, and TpAllReduce op "max" (the row max)
VOCAB_LOSS_CALLS = {"hetrt_tp_vocab_ce_stats", "hk_vocab_ce_loss_f32", "hetrt_tp_allreduce_max"}


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
p = t.compile(out_one, "--plan", save(q, "plan_one_tp2.json"), "--emit-llvm")
if not check(p.returncode == 0, f"hetc compile --plan (one stage, TP 2) exit {p.returncode}"):
    t.finish()
b0 = os.path.join(out_one, "stage_0")
sh = shards_of(b0)
check(sh.get("wte.weight") == (0, 512), f"stage_0: wte.weight not sharded by vocabulary rows "
      f"({sh.get('wte.weight')})")
calls = stage_calls(out_one, 0)
check(VOCAB_LOSS_CALLS <= calls,
      "stage_0: no vocab-parallel loss (VocabCeStats, VocabCrossEntropy, TpAllReduce max): "
      "its code calls none of %s" % sorted(VOCAB_LOSS_CALLS - calls))
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

ref_run = t.train(STEPS + 1)
check(ref_run.returncode == 0, "hetc train failed")
ref_text = ref_run.stdout
ref_l = stagetest.losses(ref_text)
check(len(ref_l) == STEPS + 1, f"hetc train printed {len(ref_l)} steps")

ck = t.path("ckpt")
t.expect_run(out_one, STEPS, ref_l, "one stage TP 2", "--checkpoint-dir", ck)
# the same plan with every node interpreted (hetc compile --interpret-nodes):
# the node interpreter (interp/) shifts the parsed graph's vocab_start to
# TP rank 1's, as the direct calls' hetrt_tp_* entries do
out_interp = t.path("build_one_tp2_interp")
p = t.compile(out_interp, "--plan", t.path("plan_one_tp2.json"), "--interpret-nodes")
if check(p.returncode == 0, f"hetc compile --interpret-nodes (one stage, TP 2) exit "
         f"{p.returncode}"):
    t.expect_run(out_interp, 4, ref_l, "one stage TP 2, interpreted", tol=1e-5)

for name, out in (("two stages TP 1", out1), ("two stages TP 2", out_two),
                  ("one stage TP 2", out_one)):
    t.expect_resume(out, ck, t.path("ckpt_" + name.replace(" ", "_")), STEPS + 1, ref_l, name)

# ------------------------------------------- 3. gpt_tiny, tied: embedding alone, head alone
# (issue 18, item 5) The tied table is sharded only by a stage holding both ends, so
# the embedding alone and the head + loss alone have nothing tp_shard shards: under
# TP 2 they run replicated on both TP ranks (a seed planner's TP on such a stage).
t.cluster = "three_mesh.yaml"
tplan = t.planned(t.path("planned_three"))
if tplan is None:
    t.finish()
q3 = three_stages(tplan, (2, 1, 2))
out_rep = t.path("build_replicated_tp2")
p = t.compile(out_rep, "--plan", save(q3, "plan_replicated_tp2.json"))
if check(p.returncode == 0, f"hetc compile --plan (embedding alone TP 2, head alone TP 2) "
         f"exit {p.returncode}"):
    for k in (0, 2):
        b = os.path.join(out_rep, f"stage_{k}")
        tpl = config_lines(b, "tp")  # `tp t_0 .. t_{N-1}`: this stage's degree at k + 1
        check(tpl and len(tpl[0].split()) == 4 and tpl[0].split()[k + 1] == "2",
              f"replicated: stage_{k} config {tpl} (want its tp 2)")
        check(not shards_of(b), f"replicated: stage_{k} shards {shards_of(b)} (nothing to shard)")
    pr = t.launch(out_rep, STEPS, "--checkpoint-dir", t.path("ckpt_rep"))
    got, w = t.expect_losses(pr, "embedding alone + head alone TP 2 (replicated)", ref_l,
                             n=STEPS)
    # the global gradient norm counts a replicated parameter once (clipping uses it)
    norms = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", pr.stdout, re.M)}
    rnorms = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"^step\s+(\d+)/\d+ \|.*?grad norm (\S+)", ref_text, re.M)}
    wn = max((abs(v - rnorms.get(k, 1e30)) / max(abs(rnorms.get(k, 1e30)), 1e-30)
              for k, v in norms.items()), default=1.0)
    check(len(norms) == STEPS and wn <= 5e-5, f"replicated TP: {len(norms)} grad norms, "
          f"max relative difference {wn:.3g} from hetc train's (5e-5: printed 6 digits)")
    print(f"tied gpt_tiny, embedding alone and head alone under TP 2 (replicated): {STEPS} "
          f"steps == hetc train to {w:.2g} relative, grad norms to {wn:.2g}", flush=True)

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
    p = u.compile(lbuilds[tp], "--plan", path, "--emit-llvm")
    if not check(p.returncode == 0, f"hetc compile --plan (llama, TP {tp}) exit {p.returncode}"):
        t.finish()
s0 = shards_of(os.path.join(lbuilds[2], "stage_0"))
s2 = shards_of(os.path.join(lbuilds[2], "stage_2"))
check(s0.get("tok_embeddings.weight") == (0, 256),
      f"llama stage_0: embedding not sharded by vocabulary rows: {s0}")
head = [n for n, (ax, full) in s2.items() if ax == 1 and full == 256]
check(len(head) == 1, f"llama stage_2: the head weight not sharded by vocabulary columns: {s2}")
check(VOCAB_LOSS_CALLS <= stage_calls(lbuilds[2], 2), "llama stage_2: no vocab-parallel loss")
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
