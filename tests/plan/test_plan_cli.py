"""`hetc plan` end to end on the example model and clusters.

Oracles: docs/PLAN_FORMAT.md (the documented plan.json keys), the cluster
files (device counts, read here with PyYAML), the layer count hetc reports,
a second run (determinism), and the error cases' expected messages.
usage: test_plan_cli.py HETC SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
CL = os.path.join(SRC, "examples", "clusters")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)


def hetc(*args, out=None):
    """hetc args [-o out], at --precision fp32 (tests/hetc_cmd.py: the plans
    these checks were written for)"""
    cmd = pinned([HETC, *args] + (["-o", out] if out else []))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


# documented keys: the plan.json table of docs/PLAN_FORMAT.md
doc = open(os.path.join(SRC, "docs", "PLAN_FORMAT.md")).read()
section = doc[doc.index("## plan.json"):doc.index("## plan.txt")]
top, stage_keys = set(), set()
for row in re.findall(r"^\| (`[^|]*) \|", section, re.M):
    names = re.findall(r"`([^`]*)`", row)
    in_stage = names and names[0].startswith("stages[].")
    for n in names:
        n = n.replace("stages[].", "")
        (stage_keys if in_stage else top).add(n)
top.add("stages")
check(len(top) > 10 and len(stage_keys) > 8, f"could not read the documented keys: {top} {stage_keys}")

COMMON = ["--seq", "64", "--microbatch", "2", "--global-batch", "64", "--threads", "2"]
with tempfile.TemporaryDirectory() as tmp:
    for cluster in ("case_study.yaml", "three_mesh.yaml"):
        cpath = os.path.join(CL, cluster)
        spec = yaml.safe_load(open(cpath))
        out = os.path.join(tmp, cluster)
        p = hetc("plan", MODEL, cpath, *COMMON, "--dump-ir-after=plan", out=out)
        check(p.returncode == 0, f"{cluster}: exit {p.returncode}: {p.stderr}")
        if p.returncode:
            continue
        m = re.search(r"^layers: (\d+) ", p.stderr, re.M)
        check(m is not None, f"{cluster}: no 'layers:' line")
        L = int(m.group(1)) if m else 0
        check(re.search(r"^modules: 4 found", p.stderr, re.M) is not None,
              f"{cluster}: gpt_tiny has 4 blocks (examples/gpt_tiny.json)")
        for f in ("plan.json", "plan.txt", "timeline.json", "timeline.svg"):
            check(os.path.getsize(os.path.join(out, f)) > 0, f"{cluster}: {f} missing")
        plan = json.load(open(os.path.join(out, "plan.json")))
        check(top <= set(plan), f"{cluster}: plan.json lacks {top - set(plan)}")
        for st in plan["stages"]:
            check(stage_keys <= set(st), f"{cluster}: stage lacks {stage_keys - set(st)}")
        # stages cover layers 1..L exactly once, in order
        nxt = 1
        for st in plan["stages"]:
            check(st["layers"][0] == nxt and st["layers"][1] >= nxt, f"{cluster}: stage layers {st['layers']}")
            nxt = st["layers"][1] + 1
        check(nxt == L + 1, f"{cluster}: stages end at layer {nxt - 1}, model has {L}")
        # every device of every mesh is used (Eq. 22), dp x tp = submesh devices
        used = {}
        for st in plan["stages"]:
            used[st["mesh"]] = used.get(st["mesh"], 0) + st["submesh"][0] * st["submesh"][1]
            check(st["dp"] * st["tp"] == st["submesh"][0] * st["submesh"][1], f"{cluster}: dp x tp")
        for mesh in spec["meshes"]:
            want = mesh["nodes"] * mesh["devices_per_node"]
            check(used.get(mesh["name"]) == want, f"{cluster}: mesh {mesh['name']} uses {used.get(mesh['name'])} of {want}")
        check(plan["microbatches"] == 32, f"{cluster}: B = {plan['microbatches']}, want 64 / 2")
        check(plan["iteration_time"] > 0 and plan["objective"] > 0, f"{cluster}: times")
        # plan.txt is what hetc printed
        check(p.stdout == open(os.path.join(out, "plan.txt")).read(), f"{cluster}: stdout != plan.txt")
        # the IR dump after plan carries stage ids that agree with plan.json
        ir = open(os.path.join(out, "ir", [f for f in os.listdir(os.path.join(out, "ir")) if f.endswith("-plan.ir")][0])).read()
        for line in ir.splitlines():
            lm, sm = re.search(r" layer=(\d+)", line), re.search(r" stage=(\d+)", line)
            if lm or sm:
                check(lm and sm, f"{cluster}: node without layer or stage: {line.strip()}")
                if lm and sm:
                    st = plan["stages"][int(sm.group(1))]
                    check(st["layers"][0] <= int(lm.group(1)) <= st["layers"][1], f"{cluster}: {line.strip()}")
        # deterministic: a second run (other thread count) writes the same files
        out2 = out + ".again"
        p2 = hetc("plan", MODEL, cpath, *COMMON[:-1], "1", out=out2)
        for f in ("plan.json", "plan.txt", "timeline.json", "timeline.svg"):
            check(open(os.path.join(out, f)).read() == open(os.path.join(out2, f)).read(),
                  f"{cluster}: {f} differs between runs")
        # the default invocation is hetc compile: the plan of hetc plan
        # --dp-divides-microbatch (stage binaries split a microbatch's rows
        # evenly over DP ranks), then the stage binaries.  --no-intra-op on
        # both (a plan flag the default command passes on): the stage
        # binaries run tp = 1, ZeRO 0 until issue 9's execution side lands,
        # and hetc plan's own default chooses TP / ZeRO / recompute.
        out3 = out + ".default"
        p3 = hetc(MODEL, cpath, *COMMON, "--no-intra-op", out=out3)
        out4 = out + ".dpdiv"
        p4 = hetc("plan", MODEL, cpath, *COMMON, "--dp-divides-microbatch", "--no-intra-op", out=out4)
        check(p3.returncode == 0 and p4.returncode == 0 and
              open(os.path.join(out3, "plan.json")).read() ==
              open(os.path.join(out4, "plan.json")).read(),
              f"{cluster}: `hetc MODEL CLUSTER` plans differently from hetc plan --dp-divides-microbatch")
        if p4.returncode == 0:
            mb = int(COMMON[COMMON.index("--microbatch") + 1])
            for st in json.load(open(os.path.join(out4, "plan.json")))["stages"]:
                check(mb % st["dp"] == 0, f"{cluster}: dp {st['dp']} does not divide microbatch {mb}")
        check(os.access(os.path.join(out3, "stage_0"), os.X_OK) and
              os.path.exists(os.path.join(out3, "launch.sh")),
              f"{cluster}: the default command wrote no stage binaries")
        print(f"ok   {cluster}: {len(plan['stages'])} stages over {L} layers")

    # every schedule plans and simulates
    for s in ("h1f1b", "1f1b", "eager1f1b", "gpipe"):
        out = os.path.join(tmp, "sched_" + s)
        p = hetc("plan", MODEL, os.path.join(CL, "case_study.yaml"), *COMMON, "--schedule", s, out=out)
        check(p.returncode == 0 and json.load(open(os.path.join(out, "plan.json")))["schedule"] == s,
              f"schedule {s}: exit {p.returncode} {p.stderr[-300:]}")

    # --layers sets L
    out = os.path.join(tmp, "layers")
    p = hetc("plan", MODEL, os.path.join(CL, "case_study.yaml"), *COMMON, "--layers", "14", out=out)
    check(p.returncode == 0 and re.search(r"^layers: 14 ", p.stderr, re.M) is not None,
          f"--layers 14: {p.stderr[-300:]}")

    # error cases
    bad = os.path.join(tmp, "bad.yaml")
    open(bad, "w").write("meshes:\n  - name: a\n    device: A100-40GB\n    nodes: zero\n")
    p = hetc("plan", MODEL, bad, *COMMON, out=os.path.join(tmp, "e1"))
    check(p.returncode != 0 and "nodes" in p.stderr and re.search(r"bad.yaml:\d+", p.stderr), f"bad yaml: {p.stderr}")
    p = hetc("plan", MODEL, os.path.join(CL, "case_study.yaml"), "--seq", "64", "--microbatch", "3",
             "--global-batch", "64", out=os.path.join(tmp, "e2"))
    check(p.returncode != 0 and "not divisible" in p.stderr, f"global batch: {p.stderr}")
    tiny = os.path.join(tmp, "tiny.yaml")
    open(tiny, "w").write("meshes:\n  - name: a\n    device: {base: A100-40GB, memory_gb: 0.5}\n"
                          "    nodes: 1\n    devices_per_node: 1\n")
    p = hetc("plan", MODEL, tiny, *COMMON, out=os.path.join(tmp, "e3"))
    check(p.returncode != 0 and "fits nowhere" in p.stderr and "A100-40GB" in p.stderr,
          f"model that fits nowhere: {p.stderr}")
    p = hetc("plan", MODEL, os.path.join(CL, "case_study.yaml"), *COMMON, "--schedule", "zigzag",
             out=os.path.join(tmp, "e4"))
    check(p.returncode == 2 and "unknown schedule" in p.stderr, f"bad schedule: {p.stderr}")
    p = hetc("plan", MODEL, out=os.path.join(tmp, "e5"))
    check(p.returncode == 2, "missing cluster accepted")
    p = hetc("plan", os.path.join(tmp, "missing.onnx"), os.path.join(CL, "case_study.yaml"), *COMMON,
             out=os.path.join(tmp, "e6"))
    check(p.returncode == 1 and "missing.onnx" in p.stderr, f"missing model: {p.stderr}")

print(f"{len(fails)} failures")
sys.exit(1 if fails else 0)
