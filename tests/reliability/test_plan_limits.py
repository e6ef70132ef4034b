"""hetc plan on meshes with many submesh shapes (issue 16 items 2 and 3).

A mesh of N nodes x 8 devices has N + 4 submesh shapes (1,1) (1,2) (1,4)
(1,8) (2,8) .. (N,8).  explain_memory kept them in Submesh subs[64] and read
past it (ASan: stack-buffer-overflow) when nothing fits; the DP packed its
choice as i*256 + j, so past 256 shapes the index spilled into the layer
("cost oracle failed").

usage: test_plan_limits.py HETC SOURCE_DIR
"""
import os
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
COMMON = ["--seq", "64", "--microbatch", "2", "--global-batch", "64", "--threads", "2"]


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


tmp = rc.workdir()
test_nothing_fits_big_mesh(tmp)
rc.finish()
