"""Per-stage row tables: heterogeneous DP with any per-rank row split (issue 18, items 1, 2).

A hand-written plan.json on examples/gpt_tiny.onnx (18 layers, seq 64) gives
a stage's DP ranks the rows its `rows` says, as Zorse's and Metis's plans
share a microbatch in proportion to each device's speed: not the runtime's
own split (the first rows mod dp ranks one row more).

- plan A: 4-row microbatches, 4 a step; stage 0 (layers 1-9) over DP 2 with
  rows [1, 3], stage 1 (layers 10-18) over DP 3 with rows [1, 2, 1] (not
  rt_row_split's [2, 1, 1], and a count that comes back after another:
  stage_1 for DP ranks 0 and 2, stage_1_r2 between them in launch order).
  The boundary reshard moves rows [0, 1) | [1, 4) to [0, 1) | [1, 3) | [3, 4).
- plan A with ZeRO-2 on both stages (flat even shards, uneven rows) and
  TP 2 on stage 0 (its DP rank with one row: TP pieces of 1 and 0 rows).
- plan B: 8-row microbatches, 2 a step; stage 0 (layers 1-6) DP 1 x TP 2
  (each TP rank sends its piece of the rows: rt_stage_row_overlaps with
  TP on one side), stage 1 (layers 7-18) over DP 4 with rows [2, 1, 1, 4]
  and ZeRO-1.

Oracle: `hetc train`, one process, the same global batch of 16 rows (4 x 4
and 2 x 8 microbatches): 10 steps' losses to 1e-5 relative.  Each row
count is its own binary (stage_S for DP rank 0's count, stage_S_rN for
another count N); launch.sh's mpirun command and srun.conf start them in DP
rank order; every binary carries the row table (`rowtable` records).

Bad tables are refused naming the stage and the key: a sum other than the
microbatch's rows, a zero share, a length other than dp, a non-number.  The
runtime's own split written for another dp (a plan whose dp was edited by
hand) is ignored with a warning, as before.  A DP group over two meshes
(`parts`) compiles and launch.sh places each part's ranks on its mesh
(rank_mesh, the hostfile template, --host per run); parts that do not add
up to dp are refused naming the key.

usage: test_stages_rowtable.py HETC WORKDIR
"""
import json
import os
import re

from stagetest import StageTest, losses, config_lines

STEPS = 10
t = StageTest("uneven_dp.yaml", horizon=STEPS)
check = t.check


def plan(rows_per_mb, stages):
    """A plan.json dict: 16 rows a step in microbatches of rows_per_mb, the
    stages given as (layers, dp, rows or None, warmup, zero[, tp])."""
    st = []
    for k, (layers, dp, rows, warm, zero, *tp) in enumerate(stages):
        tp = tp[0] if tp else 1
        s = {"index": k, "layers": list(layers), "mesh": "v100", "device": "V100-32GB",
             "submesh": [1, dp * tp], "dp": dp, "tp": tp, "zero": zero, "recompute": "none",
             "warmup": warm}
        if rows is not None:
            s["rows"] = rows
        st.append(s)
    return {"version": 2, "schedule": "h1f1b", "microbatches": 16 // rows_per_mb,
            "global_batch": 16, "seq": t.seq, "stages": st}


def write(name, q):
    path = t.path(name + ".json")
    json.dump(q, open(path, "w"), indent=1)
    return path


def binaries(q, k):
    """stage k's binaries in DP rank order, as launch.sh must start them:
    [(name, ranks)], stage_K for DP rank 0's rows, stage_K_rN for N rows;
    each DP rank's TP ranks run its binary."""
    rows, tp = q["stages"][k]["rows"], q["stages"][k]["tp"]
    runs = []
    for n in rows:
        name = f"stage_{k}" if n == rows[0] else f"stage_{k}_r{n}"
        if runs and runs[-1][0] == name:
            runs[-1][1] += tp
        else:
            runs.append([name, tp])
    return runs


def run_plan(label, q, ref, mb):
    out = t.path("build_" + label)
    p = t.compile(out, "--plan", write("plan_" + label, q), mb=mb)
    if not check(p.returncode == 0, f"{label}: hetc compile --plan exit {p.returncode}"):
        return
    dry = t.run([os.path.join(out, "launch.sh"), "--dry-run", "--data", "x"]).stdout
    srun = open(os.path.join(out, "srun.conf")).read()
    first = 0
    for k, s in enumerate(q["stages"]):
        if "rows" not in s:
            first += s["dp"] * s["tp"]
            continue
        runs = binaries(q, k)
        want = " : ".join(f"-np {n} {out}/{b} --data x" for b, n in runs)
        check(want in dry, f"{label}: launch.sh --dry-run lacks {want!r}: {dry.strip()}")
        for b, n in runs:
            rng = f"{first}-{first + n - 1}" if n > 1 else f"{first}"
            check(re.search(rf"^{rng} \S*/{b}$", srun, re.M) is not None,
                  f"{label}: srun.conf does not give ranks {rng} to {b}: {srun}")
            first += n
            # the binary's own rows, and the row table of every stage
            loc = config_lines(os.path.join(out, b), "local_rows")
            n_rows = int(re.search(r"_r(\d+)$", b).group(1)) if "_r" in b else s["rows"][0]
            check(loc == [f"local_rows {n_rows}"], f"{label}: {b}: {loc}, want {n_rows} rows")
            tab = config_lines(os.path.join(out, b), "rowtable")
            check(f"rowtable {k} " + " ".join(map(str, s["rows"])) in tab,
                  f"{label}: {b} lacks stage {k}'s row table: {tab}")
    pr = t.launch(out, STEPS)
    got, w = t.expect_losses(pr, label, ref, n=STEPS)
    shape = " | ".join(f"{s['layers'][0]}-{s['layers'][1]} dp{s['dp']} tp{s['tp']} rows "
                       f"{s.get('rows')}"
                       + (f" z{s['zero']}" if s.get("zero") else "") for s in q["stages"])
    print(f"{label} ({shape}): {STEPS} steps == hetc train to {w:.2g} relative", flush=True)


ref4 = t.reference(STEPS, mb=4, accum=4)
check(len(ref4) == STEPS, f"hetc train printed {len(ref4)} losses of {STEPS}")
a = plan(4, [((1, 9), 2, [1, 3], 2, 0), ((10, 18), 3, [1, 2, 1], 1, 0)])
run_plan("a", a, ref4, 4)
a2 = json.loads(json.dumps(a))
for s in a2["stages"]:
    s["zero"] = 2
a2["stages"][0].update(tp=2, submesh=[1, 4])  # a row table under TP: 1 row over 2 TP ranks
run_plan("a_zero2", a2, ref4, 4)

ref8 = t.reference(STEPS, mb=8, accum=2)
b = plan(8, [((1, 6), 1, None, 2, 0, 2), ((7, 18), 4, [2, 1, 1, 4], 1, 1)])
run_plan("b_zero1", b, ref8, 8)

# bad row tables: refused naming the stage and the key
for label, rows, words in (("sum", [1, 2], ['stages[0]."rows" [1, 2] sum to 3', "4 rows"]),
                           ("zero", [0, 4], ['stages[0]."rows"[0] is 0', "at least one row"]),
                           ("length", [1, 1, 2], ['stages[0]."rows" has 3 counts', '"dp" = 2']),
                           ("type", [1, "3"], ['stages[0]."rows"[1] must be a whole number'])):
    q = json.loads(json.dumps(a))
    q["stages"][0]["rows"] = rows
    p = t.compile(t.path("build_bad_" + label), "--plan", write("bad_" + label, q), mb=4,
                  quiet=True)
    check(p.returncode in (1, 2) and all(w in p.stderr for w in words),
          f"rows {rows}: exit {p.returncode}, want {words} in: {p.stderr.strip()[-400:]}")
    print(f"rows {rows} for dp 2 over 4 rows: refused: {p.stderr.strip().splitlines()[-1][:200]}",
          flush=True)

# a DP group over two meshes (plan.json parts, Zorse): plan A's stage 1 with
# DP ranks 0-1 on the v100 mesh and rank 2 on the t4 mesh.  It compiles (the
# same binaries as plan A, which ran above: on the host backend placement
# changes nothing numerically) and launch.sh places each rank on its part's
# mesh: rank_mesh, the hostfile template's slots, --host per run under
# --hostfile, the Slurm node list.
q = json.loads(json.dumps(a))
q["stages"][1]["parts"] = [{"mesh": "v100", "devices": 2, "share": 0.75},
                           {"mesh": "t4", "devices": 1, "share": 0.25}]
out = t.path("build_parts")
p = t.compile(out, "--plan", write("parts", q), mb=4, quiet=True)
if check(p.returncode == 0, f"parts: exit {p.returncode}, {p.stderr.strip()[-400:]}"):
    sh = open(os.path.join(out, "launch.sh")).read()
    rm = re.search(r"^rank_mesh=\(([^)]*)\)", sh, re.M)
    names = re.search(r"^mesh_names=\(([^)]*)\)", sh, re.M)
    check(rm and rm.group(1).split() == ["0", "0", "0", "0", "1"] and names and
          names.group(1).split() == ['"v100"', '"t4"'],
          f"parts: rank_mesh / mesh_names {rm and rm.group(0)} {names and names.group(0)}")
    check("# stage_1 x3 on mesh 0 (2 ranks) + mesh 1 (1 rank)" in sh,
          "parts: launch.sh does not say where stage 1's ranks go")
    hf = open(os.path.join(out, "hostfile")).read()
    check(re.search(r"^v100-host slots=4\b", hf, re.M) and re.search(r"^t4-host slots=1\b", hf,
                                                                     re.M),
          f"parts: hostfile template {hf}")
    hosts = t.path("parts_hosts")
    open(hosts, "w").write("hv slots=4\nht slots=1\n")
    dry = t.run([os.path.join(out, "launch.sh"), "--hostfile", hosts, "--dry-run", "--data",
                 "x"]).stdout
    want = (f"-np 1 --host hv:4 {out}/stage_1 --data x : -np 1 --host hv:4 {out}/stage_1_r2 "
            f"--data x : -np 1 --host ht:1 {out}/stage_1 --data x")
    check(want in dry, f"parts: launch.sh --hostfile --dry-run lacks {want!r}: {dry.strip()}")
    print(f"parts (stage 1 over v100 x2 + t4 x1, rows [1, 2, 1]): compiled, placed "
          f"{rm and rm.group(1)}", flush=True)
# parts that do not add up to the stage's DP ranks: refused naming the key
q["stages"][1]["parts"][1]["devices"] = 2
p = t.compile(t.path("build_parts_bad"), "--plan", write("parts_bad", q), mb=4, quiet=True)
check(p.returncode in (1, 2) and 'stages[1]."parts" hold 4 DP ranks' in p.stderr and
      '"dp" 3' in p.stderr, f"bad parts: exit {p.returncode}, {p.stderr.strip()[-400:]}")

# the runtime's split written for another dp (a plan whose dp was edited by
# hand, as stages_zero's are): ignored with a warning, the runtime's split runs
q = json.loads(json.dumps(a))
q["stages"][0]["rows"] = [2, 1, 1]
p = t.compile(t.path("build_stale"), "--plan", write("stale", q), mb=4)
check(p.returncode == 0 and 'stages[0]."rows" has 3 counts for dp = 2' in p.stderr and
      "ignored" in p.stderr and os.path.exists(t.path("build_stale", "stage_0")) and
      not os.path.exists(t.path("build_stale", "stage_0_r3")),
      f"stale rows [2, 1, 1] for dp 2: exit {p.returncode}, {p.stderr.strip()[-300:]}")

t.finish()
