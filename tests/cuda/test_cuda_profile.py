"""hetc profile (issue 7): the measured profile database.

On any machine:
  - the --analytic file equals, entry for entry, what hetc plan
    --write-profile-db writes for that device type and submesh (the same
    writer on the same layering), and loads with hetc plan --profile-db
    (every entry in context, candidates costed from it);
  - the --dry-run file (every distinct layer's training graph built by
    partition_stage and run on the host executor) has one entry per distinct
    layer signature, the same signatures as the analytic file, positive
    times, static memory equal to the analytic model's 16 B per parameter
    (an independent count: the layers pass's parameter bytes vs the
    parameters of the partitioned graph), activation memory at dp = 2 equal
    to that of half the microbatch at dp = 1 (a rank's rows), and loads with hetc plan --profile-db;
  - the model is read once per run (issue 20): -v reports one read and
    two graphs built from it, the layering graph and the layer graph;
  - bad options exit 2 with a message.
Without a GPU the default (measuring) mode exits 1 with "no CUDA device".
With one, it measures: positive times, the same signatures, and the file
loads.

usage: test_cuda_profile.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

from cudatest import CLUSTER, MODEL, check, finish

HETC, WORK = sys.argv[1], sys.argv[2]
CTX = ["--seq", "64", "--microbatch", "4"]


def run(args, want_rc=0, timeout=300):
    cmd = [HETC] + args
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    check(want_rc is None or p.returncode == want_rc,
          f"exit {p.returncode}, expected {want_rc}: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def load(path):
    with open(path) as f:
        d = json.load(f)
    check(d.get("format") == "hetc-profile-db" and d.get("version") == 1, f"{path}: header")
    return d


def plan_loads(path, nentries):
    p = run(["plan", MODEL, CLUSTER] + CTX + ["--global-batch", "16", "--profile-db", path,
                                               "--precision", "cluster-dtype",
                                               "-o", os.path.join(WORK, "plan")])
    want = f"{nentries} entries (0 of another microbatch/seq/dtype skipped)"
    check(want in p.stderr, f"hetc plan --profile-db {path}: expected '{want}' in\n{p.stderr}")
    line = [l for l in p.stderr.splitlines() if "costed candidates:" in l]
    n_db = int(line[0].split("costed candidates:")[1].split()[0]) if line else 0
    check(n_db > 0, f"hetc plan --profile-db {path}: no candidate costed from the database")


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
P = lambda name: os.path.join(WORK, name)

# 1. analytic: the planner's own writer, same figures
# the databases below are filed under the cluster's fp16 (hetc profile --dtype fp16): the
# plans read them in that dtype (--precision cluster-dtype; the default plans bf16-mixed)
run(["plan", MODEL, CLUSTER] + CTX + ["--global-batch", "16", "--write-profile-db",
                                       P("plan_db.json"), "--precision", "cluster-dtype",
                                       "-o", P("plan0")])
run(["profile", "--device-type", "A100-80GB", MODEL] + CTX +
    ["--dtype", "fp16", "--analytic", "-o", P("analytic.json")])
ref = [e for e in load(P("plan_db.json"))["entries"]
       if e["device"] == "A100-80GB" and e["submesh"] == [1, 1]]
ana = load(P("analytic.json"))
check(len(ref) > 0 and ana["entries"] == ref,
      f"--analytic entries differ from hetc plan --write-profile-db's A100-80GB [1, 1] entries")
sigs = [e["layer_sig"] for e in ana["entries"]]
check(sorted(set(ana["layers"])) == sorted(sigs), "analytic: one entry per distinct layer")
plan_loads(P("analytic.json"), len(sigs))

# 2. dry run on the host executor, dp 1 and dp 2
run(["profile", "--device-type", "A100-80GB", MODEL] + CTX +
    ["--dtype", "fp16", "--dry-run", "--reps", "1", "--warmup", "0", "-o", P("dry1.json")])
run(["profile", "--device-type", "A100-80GB", MODEL] + CTX +
    ["--dtype", "fp16", "--dry-run", "--reps", "1", "--warmup", "0", "--submesh", "1,2",
     "-o", P("dry2.json")])
d1, d2 = load(P("dry1.json")), load(P("dry2.json"))
check([e["layer_sig"] for e in d1["entries"]] == sigs, "dry run: signatures differ from analytic")
check(d1["layers"] == ana["layers"], "dry run: layer list differs from analytic")
for e, a in zip(d1["entries"], ana["entries"]):
    check(e["t_f"] > 0 and e["t_b"] > 0, f"dry run {e['layer_sig']}: non-positive time")
    check(e["mem_static"] == a["mem_static"],
          f"dry run {e['layer_sig']}: mem_static {e['mem_static']} != analytic {a['mem_static']}")
    check(e["mem_act"] > 0 or e is d1["entries"][0], f"dry run {e['layer_sig']}: no activations")
    check(e["microbatch"] == 4 and e["seq"] == 64 and e["dtype"] == "fp16" and e["dp"] == 1,
          f"dry run {e['layer_sig']}: context")
# a DP rank of dp 2 runs B / 2 rows: its layer is the dp 1 layer of microbatch 2
p = run(["profile", "--device-type", "A100-80GB", MODEL, "--seq", "64", "--microbatch", "2",
         "--dtype", "fp16", "--dry-run", "--reps", "1", "--warmup", "0", "-v",
         "-o", P("dry_b2.json")])
db2 = load(P("dry_b2.json"))
reads = re.findall(r"^profile: model read (\d+) time\(s\), (\d+) graph\(s\) built from it$",
                   p.stderr, re.M)
check(reads == [("1", "2")], f"-v: the model is read once, two graphs built from it: {reads}")
for e1, e2, eb in zip(d1["entries"], d2["entries"], db2["entries"]):
    check(e2["submesh"] == [1, 2] and e2["dp"] == 2 and e2["microbatch"] == 4,
          f"dp 2 {e2['layer_sig']}: key")
    check(e2["mem_act"] == eb["mem_act"], f"dp 2 {e2['layer_sig']}: mem_act {e2['mem_act']} "
          f"!= {eb['mem_act']} of microbatch 2 at dp 1")
    check(e2["mem_act"] < e1["mem_act"] or e1["mem_act"] == 0,
          f"dp 2 {e2['layer_sig']}: mem_act not below dp 1's")
    check(e2["mem_static"] == e1["mem_static"], f"dp 2 {e2['layer_sig']}: mem_static")
plan_loads(P("dry1.json"), len(sigs))

# 3. bad options
for args in (["--tp", "2", "--submesh", "1,2"], ["--submesh", "1,2", "--microbatch", "3"],
             ["--submesh", "0,1"], ["--dp", "3"], ["--analytic", "--dry-run"]):
    p = run(["profile", "--device-type", "A100-80GB", MODEL, "--seq", "64", "--dry-run"] + args,
            want_rc=2)
    check("hetc profile:" in p.stderr or "hetc:" in p.stderr, f"{args}: no message")
run(["profile", MODEL], want_rc=2)

# 4. the measuring mode: "no CUDA device" without one, a database with one
p = run(["profile", "--device-type", "H100-80GB", MODEL] + CTX +
        ["--reps", "3", "--warmup", "1", "-o", P("gpu.json")], want_rc=None)
if "no CUDA device" in p.stderr:
    check(p.returncode == 1, f"no device: exit {p.returncode}, expected 1")
    check(not os.path.exists(P("gpu.json")), "no device: a file was written")
    print("no GPU: the measuring mode fails with 'no CUDA device' (checked)")
else:
    check(p.returncode == 0, f"GPU present, hetc profile failed:\n{p.stderr[-3000:]}")
    g = load(P("gpu.json"))
    check([e["layer_sig"] for e in g["entries"]] == sigs, "GPU: signatures differ")
    for e in g["entries"]:
        check(e["t_f"] > 0 and e["t_b"] > 0, f"GPU {e['layer_sig']}: non-positive time")
        check(e["dtype"] == "fp32", "GPU: default dtype label is fp32")

finish(failed="failure(s)")
