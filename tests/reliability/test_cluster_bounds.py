"""cluster.yaml numbers that are finite as written but absurd (issue 16 item
11): bandwidth_gbps: 1e308 and memory_gb: 1e300 overflowed to inf after unit
scaling and reached plan.json as null; tflops_fp16: 1e-300 was accepted.
Every number now has documented bounds (docs/CLUSTER.md); outside them the
loader names file:line, the key path and the range.  Values at the bounds
still plan, with finite numbers in plan.json.

usage: test_cluster_bounds.py HETC SOURCE_DIR
"""
import json
import math
import os
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
ARGS = ["--seq", "16", "--microbatch", "2", "--global-batch", "8", "--threads", "1"]
tmp = rc.workdir()

# line 3 is the device, line 6 intra_node, line 7 inter_node
BASE = ("meshes:\n  - name: a\n    device: {DEV}\n    nodes: 2\n    devices_per_node: 2\n"
        "    intra_node: {INTRA}\n    inter_node: {INTER}\n")


def yaml_text(dev="A100-40GB", intra="{bandwidth_gbps: 2400, latency_us: 5}",
              inter="{bandwidth_gbps: 200, latency_us: 10}"):
    return BASE.replace("{DEV}", dev).replace("{INTRA}", intra).replace("{INTER}", inter)


def plan(name, text):
    y = os.path.join(tmp, name + ".yaml")
    with open(y, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "o_" + name)
    return rc.run([HETC, "plan", MODEL, y, *ARGS, "-o", out]), out


BAD = [
    ("bw_huge", yaml_text(inter="{bandwidth_gbps: 1e308, latency_us: 10}"), 7,
     "meshes[0].inter_node.bandwidth_gbps"),
    ("bw_tiny", yaml_text(intra="{bandwidth_gbps: 1e-300}"), 6, "meshes[0].intra_node.bandwidth_gbps"),
    ("lat_huge", yaml_text(intra="{bandwidth_gbps: 2400, latency_us: 1e300}"), 6,
     "meshes[0].intra_node.latency_us"),
    ("mem_huge", yaml_text(dev="{base: A100-40GB, memory_gb: 1e300}"), 3, "meshes[0].device.memory_gb"),
    ("mem_tiny", yaml_text(dev="{base: A100-40GB, memory_gb: 1e-300}"), 3, "meshes[0].device.memory_gb"),
    ("fp16_tiny", yaml_text(dev="{base: A100-40GB, tflops_fp16: 1e-300}"), 3,
     "meshes[0].device.tflops_fp16"),
    ("bf16_huge", yaml_text(dev="{base: A100-40GB, tflops_bf16: 1e300}"), 3,
     "meshes[0].device.tflops_bf16"),
    ("fp32_tiny", yaml_text(dev="{base: A100-40GB, tflops_fp32: 5e-324}"), 3,
     "meshes[0].device.tflops_fp32"),
    ("hbm_huge", yaml_text(dev="{base: A100-40GB, hbm_gbytes_s: 1e200}"), 3,
     "meshes[0].device.hbm_gbytes_s"),
]
for name, text, line, key in BAD:
    p, _ = plan(name, text)
    rc.check(p.returncode != 0 and "%s.yaml:%d" % (name, line) in p.stderr and key in p.stderr
             and "outside" in p.stderr,
             "%s: expected a refusal at line %d naming %s, got rc=%d %s"
             % (name, line, key, p.returncode, p.stderr[-500:]))

# at the bounds: accepted, and every number in plan.json is finite
GOOD = [
    ("edges_hi", yaml_text(dev="{base: A100-40GB, memory_gb: 1e6, tflops_bf16: 1e6, hbm_gbytes_s: 1e7}",
                           intra="{bandwidth_gbps: 1e7, latency_us: 0}",
                           inter="{bandwidth_gbps: 1e7, latency_us: 1e9}")),
    ("fp16_zero", yaml_text(dev="{base: A100-40GB, tflops_fp16: 0}")),  # 0 = unsupported
]


def finite(x, where):
    if isinstance(x, dict):
        for k, v in x.items():
            finite(v, where + "." + k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            finite(v, "%s[%d]" % (where, i))
    elif x is None or (isinstance(x, float) and not math.isfinite(x)):
        rc.fail("plan.json%s is %r" % (where, x))


for name, text in GOOD:
    p, out = plan(name, text)
    if rc.check(p.returncode == 0, "%s: rc=%d %s" % (name, p.returncode, p.stderr[-500:])):
        finite(json.load(open(os.path.join(out, "plan.json"))), "")
rc.finish()
