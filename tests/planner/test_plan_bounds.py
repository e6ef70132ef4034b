"""hetc plan on large clusters (issue 16 item 10): bounded search.

- --time-limit with a limit far below what the search needs returns a valid
  plan, marked as the best found so far in plan.json, plan.txt and on stderr;
- a 1,024 x 8 cluster of 4 device types plans (the node-group heuristic on
  its 256-node meshes, stated in the outputs) and the plan is valid;
- the exact search is the oracle of the heuristic and of a time-limited
  search: neither finds a smaller Eq. 13 objective than it, and where no mesh
  has more nodes than --max-node-groups the plan is the exact one, field for
  field;
- progress never goes to stdout (stdout is plan.txt), and bad --time-limit /
  --max-node-groups values are refused with the option named.

No wall-clock assertions: the timing figures are in bench/planner_bounds.

usage: test_plan_bounds.py HETC SOURCE_DIR
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
# B = 32 microbatches of 512 rows: a stage's DP ranks split a microbatch's rows, so
# no planner gives a stage a dp above them (issue 18), and these clusters' stages
# hold up to 2,048 devices (dp up to 512 beside TP)
# --precision fp32: the memory bounds below are fp32's (hetc defaults to bf16-mixed)
COMMON = ["--seq", "64", "--microbatch", "512", "--global-batch", "16384", "--threads", "2",
          "--precision", "fp32"]
TYPES = ["H100-SXM", "A100-80GB", "A100-40GB", "V100-32GB"]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)
    return cond


def cluster(path, nodes_per_mesh, types=TYPES, per_node=8):
    with open(path, "w") as f:
        f.write("name: big\ndtype: fp16\nmeshes:\n")
        for t in types:
            f.write("  - {name: %s, device: %s, nodes: %d, devices_per_node: %d, "
                    "intra_node: {bandwidth_gbps: 2400, latency_us: 5}, "
                    "inter_node: {bandwidth_gbps: 400, latency_us: 10}}\n"
                    % (t.lower(), t, nodes_per_mesh, per_node))
        f.write("default_link: {bandwidth_gbps: 100, latency_us: 20, transport: device-direct}\n")
    return path


def plan(tmp, name, yaml, *opts):
    out = os.path.join(tmp, name)
    p = subprocess.run([HETC, "plan", MODEL, yaml, *COMMON, "-o", out, *opts],
                       capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, "%s: rc=%d %s" % (name, p.returncode, p.stderr[-800:])):
        return p, None, None
    with open(os.path.join(out, "plan.json")) as f:
        pj = json.load(f)
    with open(os.path.join(out, "plan.txt")) as f:
        pt = f.read()
    return p, pj, pt


def valid(tag, pj, stderr, nodes, per_node=8, group=None):
    """Every layer once in order, every device used exactly once (Eq. 22),
    shapes of §5.2, dp x tp = devices, memory within capacity."""
    st = pj["stages"]
    nxt = 1
    used = {}
    for s in st:
        lo, hi = s["layers"]
        check(lo == nxt and hi >= lo, "%s: stage %d layers %s after %d" % (tag, s["index"], s["layers"], nxt - 1))
        nxt = hi + 1
        n, m = s["submesh"]
        check(1 <= n <= nodes and m >= 1 and per_node % m == 0 and (n == 1 or m == per_node),
              "%s: stage %d submesh %s is not a shape of %d x %d" % (tag, s["index"], s["submesh"], nodes, per_node))
        if group:
            check(m == per_node and n % group == 0,
                  "%s: stage %d submesh %s is not whole groups of %d nodes" % (tag, s["index"], s["submesh"], group))
        check(s["dp"] * s["tp"] == n * m, "%s: stage %d dp x tp != %d" % (tag, s["index"], n * m))
        check(s["mem_pred_bytes"] <= s["mem_capacity_bytes"], "%s: stage %d over memory" % (tag, s["index"]))
        used[s["mesh"]] = used.get(s["mesh"], 0) + n * m
    check(sorted(used.values()) == [nodes * per_node] * len(TYPES),
          "%s: devices used per mesh %s, want every device of every mesh" % (tag, used))
    lay = [l for l in stderr.splitlines() if l.startswith("layers: ")]
    check(lay and int(lay[0].split()[1]) == nxt - 1, "%s: layers covered %d: %s" % (tag, nxt - 1, lay))
    check(pj["objective"] > 0 and pj["iteration_time"] > 0, "%s: times %s" % (tag, pj["objective"]))


tmp = tempfile.mkdtemp(prefix="hetc_plan_bounds_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends

# 1. a limit far below the search's needs (the tabulation alone takes longer)
y256 = cluster(os.path.join(tmp, "c256x8.yaml"), 64)
p, pj, pt = plan(tmp, "tl", y256, "--time-limit", "0.000001", "--max-node-groups", "0")
if pj:
    valid("time-limited", pj, p.stderr, 64)
    check(pj["search"]["complete"] is False and "best found" in pj["search"]["result"],
          "plan.json search: %s" % pj["search"])
    check("best plan found so far" in pt, "plan.txt does not say best-so-far:\n" + pt)
    check("best plan found so far" in p.stderr and "--time-limit" in p.stderr,
          "stderr does not say best-so-far: " + p.stderr[-600:])

# 2. 1,024 nodes x 8 GPUs of 4 types: 256-node meshes, node groups of 8
y1k = cluster(os.path.join(tmp, "c1024x8.yaml"), 256)
p, pj, pt = plan(tmp, "big", y1k)
if pj:
    valid("1024x8", pj, p.stderr, 256, group=8)
    check(pj["search"]["complete"] is True and pj["search"]["node_grouped_meshes"] == 4,
          "plan.json search: %s" % pj["search"])
    check("heuristic" in pt and "heuristic" in p.stderr, "the heuristic is not stated")
    # stdout is plan.txt, nothing else (progress lines go to stderr only)
    check(p.stdout == pt, "stdout is not plan.txt (%d vs %d chars)" % (len(p.stdout), len(pt)))

# 3. the exact search as the oracle: 2 meshes of 40 nodes (heuristic: groups of 2)
y40 = cluster(os.path.join(tmp, "c80x8.yaml"), 40, types=TYPES[:2])
TYPES_SAVE, TYPES = TYPES, TYPES[:2]
pe, ex, _ = plan(tmp, "exact", y40, "--max-node-groups", "0")
ph, he, _ = plan(tmp, "heur", y40, "--max-node-groups", "16")
pn, nc, _ = plan(tmp, "nocoarse", y40, "--max-node-groups", "40")
pl, tl, _ = plan(tmp, "tl40", y40, "--max-node-groups", "0", "--time-limit", "0.000001")
if ex and he and nc and tl:
    valid("exact", ex, pe.stderr, 40)
    valid("heuristic", he, ph.stderr, 40, group=4)
    valid("time-limited 40", tl, pl.stderr, 40)
    check(ex["search"]["complete"] is True and ex["search"]["node_grouped_meshes"] == 0,
          "exact search: %s" % ex["search"])
    check(he["search"]["node_grouped_meshes"] == 2, "heuristic search: %s" % he["search"])
    check(he["objective"] >= ex["objective"] * (1 - 1e-12),
          "heuristic objective %.9g below the exact optimum %.9g" % (he["objective"], ex["objective"]))
    check(tl["objective"] >= ex["objective"] * (1 - 1e-12),
          "time-limited objective %.9g below the exact optimum %.9g" % (tl["objective"], ex["objective"]))
    check(nc == ex, "no mesh above --max-node-groups: the plan differs from the exact search")
TYPES = TYPES_SAVE

# 4. bad values
for opt, val in (("--time-limit", "0"), ("--time-limit", "-3"), ("--time-limit", "abc"),
                 ("--max-node-groups", "-1")):
    p = subprocess.run([HETC, "plan", MODEL, y256, *COMMON, "-o", os.path.join(tmp, "bad"), opt, val],
                       capture_output=True, text=True)
    check(p.returncode == 2 and opt in p.stderr, "%s %s: rc=%d %s" % (opt, val, p.returncode, p.stderr))

print("test_plan_bounds: %d failure(s)" % failures)
sys.exit(1 if failures else 0)
