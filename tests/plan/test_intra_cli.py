"""`hetc plan` intra-op choices (issue 9): the plan.json keys tp / zero /
recompute and plan.txt's intra-op column agree; --no-intra-op is the same
plan as the explicit restrictions (--max-tp 1 --zero 0 --recompute none)
and has none of them; bad option values are refused; on a cluster whose
memory binds, the intra-op plan exists where --no-intra-op has none, every
stage fits its device memory (mem_pred_bytes <= capacity, the oracle being
the cluster file), and more device memory never gives a slower plan.
`hetc compile` plans with TP (no --max-tp 1 any more: the planner offers
tp > 1 only to stages holding whole patterns tp_shard shards): gpt_tiny
compiles onto three_mesh.yaml and tiny_hetero.yaml with the default options
(three_mesh used to plan its head-only stage at DP4xTP2, which partition
refused), and a plan with a TP stage runs 3 steps with the losses of
`hetc train` to 1e-5 relative.
usage: test_intra_cli.py HETC SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

HETC, SRC = sys.argv[1], sys.argv[2]
TINY = os.path.join(SRC, "examples", "gpt_tiny.onnx")
CL = os.path.join(SRC, "examples", "clusters")
GIB = 1024 ** 3
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)


def plan(model, cluster, out, *args):
    p = subprocess.run([HETC, "plan", model, cluster, "-o", out, "--threads", "2",
                        "--precision", "fp32", *args],
                       capture_output=True, text=True, timeout=300)
    js = json.load(open(os.path.join(out, "plan.json"))) if p.returncode == 0 else None
    return p, js


def intra_cell(st):
    s = f"DP{st['dp']}xTP{st['tp']}"
    s += {0: "", 1: " Z1", 2: " Z2"}[st["zero"]]
    s += {"none": "", "selective": " RC-sel", "full": " RC-full"}[st["recompute"]]
    return s


def keys_ok(js, out, tag):
    txt = open(os.path.join(out, "plan.txt")).read()
    for i, st in enumerate(js["stages"]):
        check(st["tp"] >= 1 and st["tp"] & (st["tp"] - 1) == 0, f"{tag}: stage {i} tp power of two")
        check(st["zero"] in (0, 1, 2), f"{tag}: stage {i} zero")
        check(st["recompute"] in ("none", "selective", "full"), f"{tag}: stage {i} recompute")
        check(st["dp"] * st["tp"] == st["submesh"][0] * st["submesh"][1], f"{tag}: dp x tp = devices")
        check(st["tp"] <= st["submesh"][1], f"{tag}: TP inside a node")
        row = [l for l in txt.splitlines() if re.match(rf"^\s+{i}\s", l)]
        check(row and intra_cell(st) in row[0], f"{tag}: plan.txt shows '{intra_cell(st)}'")


with tempfile.TemporaryDirectory() as tmp:
    o = lambda n: os.path.join(tmp, n)
    base = ["--seq", "64", "--microbatch", "4"]
    p, full = plan(TINY, os.path.join(CL, "tiny_hetero.yaml"), o("a"), *base)
    check(p.returncode == 0, "tiny: plans: " + p.stderr[-300:])
    if full:
        keys_ok(full, o("a"), "tiny")
    p1, no = plan(TINY, os.path.join(CL, "tiny_hetero.yaml"), o("b"), *base, "--no-intra-op")
    p2, rs = plan(TINY, os.path.join(CL, "tiny_hetero.yaml"), o("c"), *base, "--max-tp", "1", "--zero", "0",
                  "--recompute", "none")
    check(no and rs and no["stages"] == rs["stages"], "--no-intra-op == --max-tp 1 --zero 0 --recompute none")
    if no:
        keys_ok(no, o("b"), "tiny --no-intra-op")
        check(all(s["tp"] == 1 and s["zero"] == 0 and s["recompute"] == "none" for s in no["stages"]),
              "--no-intra-op: tp 1, zero 0, no recompute")
    for bad in (["--max-tp", "3"], ["--zero", "3"], ["--recompute", "some"], ["--max-tp", "0"]):
        p, _ = plan(TINY, os.path.join(CL, "tiny_hetero.yaml"), o("d"), *base, *bad)
        check(p.returncode == 2 and bad[0] in p.stderr, f"{bad} refused: rc {p.returncode} {p.stderr[-200:]}")

    # memory binds: an 8-block GPT (hidden 2048) on 4 devices of small memory
    m = o("gpt8.onnx")
    subprocess.run([sys.executable, os.path.join(SRC, "tools", "gen_model.py"), "--family", "gpt",
                    "--layers", "8", "--hidden", "2048", "--heads", "16", "--vocab", "51200", "--seq", "1024",
                    "-o", m], check=True, capture_output=True)
    big = ["--seq", "1024", "--microbatch", "4", "--global-batch", "64"]
    times = []
    # 6 GiB: the smallest that fits an intra-op plan since the planner sizes the
    # arena the fp32 stage binaries allocate (issue 17: scratch, the logits)
    for mem in (6, 8, 16, 64):
        y = o(f"mem{mem}.yaml")
        open(y, "w").write(f"""name: small-mem
dtype: fp16
meshes:
  - name: a
    device: {{base: A100-40GB, memory_gb: {mem}}}
    nodes: 1
    devices_per_node: 4
    intra_node: {{bandwidth_gbps: 2400, latency_us: 5}}
""")
        p, js = plan(m, y, o(f"m{mem}"), *big)
        check(p.returncode == 0, f"mem {mem}: intra-op plan exists: {p.stderr[-300:]}")
        if js:
            keys_ok(js, o(f"m{mem}"), f"mem {mem}")
            for i, st in enumerate(js["stages"]):
                check(st["mem_pred_bytes"] <= mem * GIB, f"mem {mem}: stage {i} fits memory")
            times.append((mem, js["iteration_time"], js["objective"]))
            if mem == 6:
                check(any(s["zero"] or s["tp"] > 1 or s["recompute"] != "none" for s in js["stages"]),
                      "mem 6: an intra-op choice is used")
        if mem == 6:
            p, _ = plan(m, y, o("m6no"), *big, "--no-intra-op")
            check(p.returncode != 0 and "no feasible plan" in p.stderr, "mem 6: no plan without intra-op")
    for (m0, t0, e0), (m1, t1, e1) in zip(times, times[1:]):
        check(e1 <= e0 * (1 + 1e-12), f"more memory ({m0} -> {m1} GiB) never slower: Eq. 13 {e0} -> {e1}")
    print("times:", times)


def losses(text):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M)}


sys.path.insert(0, os.path.join(SRC, "tests"))
from sanenv import compiler_env  # noqa: E402

DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
# the compile and hetc train alike; fp32: launch.sh vs hetc train to fp32's tolerance
OPT = ["--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine", "--steps", "3", "--precision",
       "fp32"]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mca_base_component_disable_dlclose="1",
           HETRT_TIMEOUT_S="120")
env.setdefault("LSAN_OPTIONS", "suppressions=" + os.path.join(SRC, "tests", "runtime", "lsan.supp") +
               ":fast_unwind_on_malloc=0:malloc_context_size=40")
with tempfile.TemporaryDirectory() as tmp:
    ref = {}
    ran_tp = 0
    for cl, mb, gb in (("three_mesh", 4, 16), ("three_mesh", 8, 32), ("tiny_hetero", 4, 16)):
        out = os.path.join(tmp, f"{cl}-{mb}")
        p = subprocess.run([HETC, TINY, os.path.join(CL, cl + ".yaml"), "--seq", "64", "--microbatch",
                            str(mb), "--global-batch", str(gb), "--threads", "2", *OPT, "-o", out],
                           capture_output=True, text=True, timeout=300, env=compiler_env(env))
        check(p.returncode == 0, f"compile {cl} mb {mb}: {p.stderr[-400:]}")
        if p.returncode:
            continue
        st = json.load(open(os.path.join(out, "plan.json")))["stages"]
        print(f"{cl} mb {mb}:", ", ".join(f"{s['layers']} {intra_cell(s)}" for s in st))
        if not any(s["tp"] > 1 for s in st):
            continue
        ran_tp += 1
        if (mb, gb) not in ref:
            r = subprocess.run([HETC, "train", TINY, "--data", DATA, "--microbatch", str(mb), "--accum",
                                str(gb // mb), "--seq", "64", *OPT, "--no-checkpoint"],
                               capture_output=True, text=True, timeout=300, env=compiler_env(env))
            check(r.returncode == 0, f"hetc train mb {mb}: {r.stderr[-300:]}")
            ref[(mb, gb)] = losses(r.stdout)
        p = subprocess.run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", "3",
                            "--checkpoint-dir", out + "-ckpt"],  # fresh runs refuse used ones
                           capture_output=True, text=True, timeout=300, env=env)
        got, want = losses(p.stdout), ref[(mb, gb)]
        check(p.returncode == 0 and sorted(got) == [1, 2, 3],
              f"launch {cl} mb {mb}: rc {p.returncode}, steps {sorted(got)} {p.stderr[-400:]}")
        for k, v in got.items():
            rel = abs(v - want.get(k, float("inf"))) / max(abs(want.get(k, 1.0)), 1e-30)
            check(rel <= 1e-5, f"launch {cl} mb {mb} step {k}: loss {v} vs hetc train {want.get(k)}")
        print(f"  TP run == hetc train: {got}")
    print("compiled plans with a TP stage run:", ran_tp)

print("intra_cli:", "FAIL" if fails else "ok")
sys.exit(1 if fails else 0)
