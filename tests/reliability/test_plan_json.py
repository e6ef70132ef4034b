"""hetc compile --plan FILE with out-of-range integers and unknown strings
(issue 16 item 12): layer numbers up to 9e15 were cast to int ([2, 2^32+18]
read as [2, 18]), "schedule": "zzz" and a stage "mesh" the cluster lacks were
accepted, a bad "seq" was silently ignored.  Every integer is now
range-checked and every string enumerated (driver/plan_json_check.c); the
error names the file and the key.  The unedited plan still compiles.

usage: test_plan_json.py HETC SOURCE_DIR
"""
import json
import os
import re
import sys

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
CLUSTER = os.path.join(SRC, "examples", "clusters", "case_study.yaml")
ARGS = ["--seq", "16", "--microbatch", "4", "--global-batch", "16", "--threads", "1"]
tmp = rc.workdir()

p = rc.run([HETC, "plan", MODEL, CLUSTER, *ARGS, "-o", os.path.join(tmp, "p")])
if not rc.check(p.returncode == 0, "plan: %s" % p.stderr[-500:]):
    rc.finish()
good = json.load(open(os.path.join(tmp, "p", "plan.json")))
L = good["stages"][-1]["layers"][1]
rc.check(len(good["stages"]) >= 2, "want 2+ stages: %s" % good["stages"])


def compile_plan(name, q):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(q, f)
    return rc.run([HETC, "compile", MODEL, CLUSTER, *ARGS, "--plan", path, "-o",
                   os.path.join(tmp, "out_" + name)], timeout=300), path


def edited(fn):
    q = json.loads(json.dumps(good))
    fn(q)
    return q


def setk(*keys_value):
    *keys, value = keys_value

    def fn(q):
        o = q
        for k in keys[:-1]:
            o = o[k]
        o[keys[-1]] = value
    return fn


BAD = [
    # the example: [first, 2^32 + L] was read as [first, L]
    ("layers_wrap", setk("stages", -1, "layers", 1, 2 ** 32 + L), r'stages\[\d+\]\."layers"\[1\]'),
    ("layers_9e15", setk("stages", -1, "layers", 1, 9e15), r'stages\[\d+\]\."layers"\[1\]'),
    ("schedule_zzz", setk("schedule", "zzz"), r'"schedule".*"zzz"'),
    ("seq_str", setk("seq", "x"), r'"seq"'),
    ("seq_zero", setk("seq", 0), r'"seq"'),
    ("global_batch_9e15", setk("global_batch", 9e15), r'"global_batch"'),
    ("dp_frac", setk("stages", 0, "dp", 1.5), r'stages\[0\]\."dp"'),
    ("dp_huge", setk("stages", 0, "dp", 1e300), r'stages\[0\]\."dp"'),
    ("warmup_big", setk("stages", 0, "warmup", 2 ** 31), r'stages\[0\]\."warmup"'),
    ("zero_3", setk("stages", 0, "zero", 3), r'stages\[0\]\."zero"'),
    ("recompute_zzz", setk("stages", 0, "recompute", "zzz"), r'stages\[0\]\."recompute"'),
    ("mesh_unknown", setk("stages", 0, "mesh", "nope"), r'stages\[0\]\."mesh" "nope"'),
    ("mesh_type", setk("stages", 0, "mesh", 7), r'stages\[0\]\."mesh"'),
    ("device_wrong", setk("stages", 0, "device", "H100-SXM"), r'stages\[0\]\."device" "H100-SXM"'),
    ("mem_pred_neg", setk("stages", 0, "mem_pred_bytes", -1), r'stages\[0\]\."mem_pred_bytes"'),
    ("mem_pred_str", setk("stages", 0, "mem_pred_bytes", "x"), r'stages\[0\]\."mem_pred_bytes"'),
    ("link_unknown", setk("cluster", "links", 0, "between", 1, "zzz"), r'cluster\.links\[0\]\."between"\[1\] "zzz"'),
    ("microbatches_huge", setk("microbatches", 2 ** 40), r'"microbatches"'),
]
for name, fn, expect in BAD:
    p, path = compile_plan(name, edited(fn))
    rc.check(p.returncode != 0 and path in p.stderr and re.search(expect, p.stderr),
             "%s: expected an error naming %s and matching %s, got rc=%d %s"
             % (name, path, expect, p.returncode, p.stderr[-400:]))

p, _ = compile_plan("good", good)
rc.check(p.returncode == 0, "the unedited plan: rc=%d %s" % (p.returncode, p.stderr[-500:]))
rc.finish()
