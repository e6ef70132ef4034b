"""hetc plan on meshes with many submesh shapes (issue 16 items 2 and 3).

A mesh of N nodes x 8 devices has N + 4 submesh shapes (1,1) (1,2) (1,4)
(1,8) (2,8) .. (N,8).  explain_memory kept them in Submesh subs[64] and read
past it (ASan: stack-buffer-overflow) when nothing fits; the DP packed its
choice as i*256 + j, so past 256 shapes the index spilled into the layer
("cost oracle failed").

usage: test_plan_limits.py HETC SOURCE_DIR
"""
import json
import os
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
# 512 rows a microbatch: no planner gives a stage a dp above them (issue 18), and
# a 2,048-device mesh of gpt_tiny's 18 layers needs stages of many DP ranks
COMMON = ["--seq", "64", "--microbatch", "512", "--global-batch", "16384", "--threads", "2"]


def mesh_yaml(path, nodes, memory_gb=None):
    dev = "{base: A100-40GB, memory_gb: %g}" % memory_gb if memory_gb else "A100-40GB"
    with open(path, "w") as f:
        f.write("meshes:\n  - name: a\n    device: %s\n    nodes: %d\n    devices_per_node: 8\n"
                "    intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n"
                "    inter_node: {bandwidth_gbps: 200, latency_us: 10}\n" % (dev, nodes))
    return path


def test_nothing_fits_big_mesh(tmp):
    # 100 nodes: 104 shapes > 64; 0.5 GiB devices hold no layer of gpt_tiny
    y = mesh_yaml(os.path.join(tmp, "big_tiny.yaml"), 100, memory_gb=0.5)
    p = rc.run([HETC, "plan", MODEL, y, *COMMON, "-o", os.path.join(tmp, "o_tiny")])
    rc.check(p.returncode == 1 and "fits nowhere" in p.stderr and "0.50 GiB" in p.stderr,
             "nothing fits on 100 x 8: rc=%d %s" % (p.returncode, p.stderr[-600:]))


def test_2048_devices(tmp):
    # 256 nodes x 8 = 2,048 devices, 260 shapes: the whole-mesh shape (256,8)
    # has index 259, past the old radix
    y = mesh_yaml(os.path.join(tmp, "big.yaml"), 256)
    out = os.path.join(tmp, "o_big")
    # --max-node-groups 0: every shape (the default searches a 256-node mesh
    # in 32 node groups, issue 16 item 10, which would not reach index 259)
    p = rc.run([HETC, "plan", MODEL, y, *COMMON, "-o", out, "--max-node-groups", "0"])
    ok = rc.check(p.returncode == 0 and "cost oracle failed" not in p.stderr,
                  "2,048 devices: rc=%d %s" % (p.returncode, p.stderr[-800:]))
    if not ok:
        return
    plan = json.load(open(os.path.join(out, "plan.json")))
    st = plan["stages"]
    rc.check(plan["cluster"]["devices"] == 2048, "devices: %s" % plan["cluster"])
    # layers: contiguous from 1, each stage non-empty
    nxt = 1
    for s in st:
        lo, hi = s["layers"]
        rc.check(lo == nxt and hi >= lo, "stage %d layers %s after %d" % (s["index"], s["layers"], nxt - 1))
        nxt = hi + 1
        n, m = s["submesh"]
        rc.check(1 <= n <= 256 and m in (1, 2, 4, 8) and (n == 1 or m == 8),
                 "stage %d submesh %s is not a shape of 256 x 8" % (s["index"], s["submesh"]))
        rc.check(s["dp"] * s["tp"] == n * m, "stage %d: dp %d x tp %d != %d devices"
                 % (s["index"], s["dp"], s["tp"], n * m))
        rc.check(s["mem_pred_bytes"] <= s["mem_capacity_bytes"], "stage %d over memory" % s["index"])
    rc.check(sum(s["submesh"][0] * s["submesh"][1] for s in st) <= 2048, "more than 2,048 devices")
    rc.check(plan["iteration_time"] > 0 and plan["objective"] > 0, "times: %s" % plan)
    # the layer count the plan covers is the one hetc reported
    m = [l for l in p.stderr.splitlines() if l.startswith("layers: ")]
    rc.check(m and int(m[0].split()[1]) == nxt - 1, "layers covered %d: %s" % (nxt - 1, m))


tmp = rc.workdir()
test_nothing_fits_big_mesh(tmp)
test_2048_devices(tmp)
rc.finish()
