#!/usr/bin/env python3
"""hetc plan on large clusters (issue 16 item 10): wall time of the whole
`hetc plan` and of its search, with the default node-group heuristic and with
the exact search (--max-node-groups 0), plus a time-limited exact search.
Prints figures; asserts nothing about time (tests/planner/test_plan_bounds.py
asserts behaviour).

    python3 bench/planner_bounds/run.py [--hetc build/hetc] [--work /tmp/hetc_bench_bounds]
                                        [--threads 2] [--timeout 300] [--exact 128,256]
                                        [--sizes 128x8,256x8,1024x8,1024x1024]

Model: Alpa's GPT-39B (48 blocks, hidden 8192, 64 heads, vocab 51200) from
tools/gen_model.py (sparse weights, never read), seq 1024, microbatch 1,
global batch 1024 (B = 1024), default layers (194).  Clusters: N nodes x M
devices of 4 types (H100-SXM, A100-80GB, A100-40GB, V100-32GB; N/4 nodes
each), 2400 Gbps inside a node, 400 Gbps between nodes, 100 Gbps between
meshes.  --exact N,..: the sizes (nodes, with 8 per node) also run exact; the
exact search of 1,024 x 8 needs ~10 GB for its candidate table: not by
default."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TYPES = ["H100-SXM", "A100-80GB", "A100-40GB", "V100-32GB"]


def cluster(work, n, m):
    path = os.path.join(work, "c%dx%d.yaml" % (n, m))
    with open(path, "w") as f:
        f.write("name: c%dx%d\ndtype: fp16\nmeshes:\n" % (n, m))
        for t in TYPES:
            f.write("  - {name: %s, device: %s, nodes: %d, devices_per_node: %d, "
                    "intra_node: {bandwidth_gbps: 2400, latency_us: 5}, "
                    "inter_node: {bandwidth_gbps: 400, latency_us: 10}}\n" % (t.lower(), t, n // 4, m))
        f.write("default_link: {bandwidth_gbps: 100, latency_us: 20, transport: device-direct}\n")
    return path


def run(args, model, yaml, out, *opts):
    t0 = time.time()
    cmd = [args.hetc, "plan", model, yaml, "-o", out, "--seq", "1024", "--global-batch", "1024",
           "--threads", args.threads, "--precision", "cluster-dtype", *opts]  # as the file says
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"wall": time.time() - t0, "rc": "timeout"}
    r = {"wall": time.time() - t0, "rc": p.returncode}
    m = re.search(r"^time: .*profile ([\d.]+) s, search ([\d.]+) s", p.stderr, re.M)
    if m:
        r["profile"], r["search"] = float(m.group(1)), float(m.group(2))
    if p.returncode == 0:
        pj = json.load(open(os.path.join(out, "plan.json")))
        r.update(stages=len(pj["stages"]), objective=pj["objective"], iter=pj["iteration_time"],
                 search_info=pj["search"])
    else:
        r["err"] = (p.stderr.strip().splitlines() or ["?"])[-1][:160]
    return r


def show(tag, r):
    if r["rc"] != 0:
        print("  %-34s %s after %.1f s %s" % (tag, "TIMEOUT" if r["rc"] == "timeout" else "exit %s" % r["rc"],
                                             r["wall"], r.get("err", "")))
        return
    s = r["search_info"]
    how = ("exact" if not s["node_grouped_meshes"] else "node groups (heuristic)") + \
          ("" if s["complete"] else ", time-limited: best so far")
    print("  %-34s wall %6.1f s (profile %5.1f s, search %5.1f s); %2d stages, Eq. 13 %.4f s, "
          "simulated %.4f s; %s" % (tag, r["wall"], r.get("profile", float("nan")),
                                    r.get("search", float("nan")), r["stages"], r["objective"],
                                    r["iter"], how))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetc", default=os.path.join(SRC, "build", "hetc"))
    ap.add_argument("--work", default="/tmp/hetc_bench_bounds")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--sizes", default="128x8,256x8,1024x8,1024x1024")
    ap.add_argument("--exact", default="128,256")
    ap.add_argument("--time-limit", default="20")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "gpt39b", "model.onnx")
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(SRC, "tools", "gen_model.py"), "--family", "gpt",
                        "--layers", "48", "--hidden", "8192", "--heads", "64", "--vocab", "51200",
                        "--seq", "1024", "-o", model], check=True, capture_output=True)
    exact = {int(x) for x in args.exact.split(",") if x}
    print("GPT-39B, seq 1024, B = 1024, 4 device types, --threads %s, %d CPUs, load %.1f"
          % (args.threads, os.cpu_count(), os.getloadavg()[0]))
    for size in args.sizes.split(","):
        n, m = (int(v) for v in size.split("x"))
        y = cluster(args.work, n, m)
        print("%d nodes x %d devices (%d devices):" % (n, m, n * m))
        show("default", run(args, model, y, os.path.join(args.work, "o_%s" % size)))
        if m == 8 and n in exact:
            show("exact (--max-node-groups 0)",
                 run(args, model, y, os.path.join(args.work, "o_%s_exact" % size), "--max-node-groups", "0"))
            show("exact, --time-limit %s" % args.time_limit,
                 run(args, model, y, os.path.join(args.work, "o_%s_tl" % size), "--max-node-groups", "0",
                     "--time-limit", args.time_limit))


if __name__ == "__main__":
    main()
