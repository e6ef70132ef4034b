"""Outputs of the whole chain (cost model -> HAPT DP -> simulator -> writer)
on every example cluster with a few meshes: plan.json describes a complete
plan (stages cover layers 1..L in order, submeshes inside their meshes,
every device allocated), its figures agree with the trace (iteration time =
last event end; one trace event and one SVG rect per simulator event), and
η (Eq. 25) lies in (0, 1]."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

tool, src = sys.argv[1], sys.argv[2]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


d = tempfile.mkdtemp(prefix="hetc_chain_")
try:
    for name, L, B in (("case_study.yaml", 16, 16), ("three_mesh.yaml", 16, 8), ("single_a100.yaml", 8, 8)):
        path = os.path.join(src, "examples", "clusters", name)
        out = os.path.join(d, name)
        r = subprocess.run([tool, "plan", path, str(L), str(B), out], capture_output=True, text=True)
        check(r.returncode == 0, f"{name}: chain failed: {r.stderr}")
        if r.returncode:
            continue
        info = json.loads(r.stdout)
        cl = json.loads(subprocess.run([tool, "dump", path], capture_output=True, text=True, check=True).stdout)
        plan = json.load(open(os.path.join(out, "plan.json")))
        st = plan["stages"]
        check(st[0]["layers"][0] == 1 and st[-1]["layers"][1] == L, f"{name}: layers 1..{L} covered")
        for a, b in zip(st, st[1:]):
            check(b["layers"][0] == a["layers"][1] + 1, f"{name}: contiguous stages")
        used = {}
        for s in st:
            mesh = next(m for m in cl["meshes"] if m["name"] == s["mesh"])
            n, m = s["submesh"]
            check(n <= mesh["nodes"] and m <= mesh["per_node"], f"{name}: submesh fits its mesh")
            check(s["dp"] * s["tp"] == n * m, f"{name}: dp x tp = devices")
            check(s["mem_pred_bytes"] <= s["mem_capacity_bytes"], f"{name}: memory fits")
            used[s["mesh"]] = used.get(s["mesh"], 0) + n * m
        check(sum(used.values()) == cl["total_devices"], f"{name}: every device allocated")
        check(0 < plan["eta"] <= 1 + 1e-12, f"{name}: eta {plan['eta']}")
        check(plan["microbatches"] == B, f"{name}: B")
        check(abs(plan["iteration_time"] - info["iter_time"]) <= 1e-12 * info["iter_time"],
              f"{name}: iteration time is the simulator's")
        trace = json.load(open(os.path.join(out, "timeline.json")))
        ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        check(len(ev) == info["events"], f"{name}: {len(ev)} trace events vs {info['events']}")
        check(abs(max(e["ts"] + e["dur"] for e in ev) - info["iter_time"] * 1e6) < 1e-3, f"{name}: trace end")
        nf = sum(1 for e in ev if e["name"].startswith("F"))
        check(nf == B * len(st), f"{name}: one forward per microbatch and stage ({nf})")
        root = ET.parse(os.path.join(out, "timeline.svg")).getroot()
        rects = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if "ev" in e.get("class", "").split()]
        check(len(rects) == info["events"], f"{name}: {len(rects)} SVG event rects vs {info['events']}")
finally:
    shutil.rmtree(d)
print(f"{failures} failures")
sys.exit(1 if failures else 0)
