"""Plan output files for a hand-made plan (cluster_tool output): plan.json
parses with the keys docs/PLAN_FORMAT.md lists and η recomputed here from
Eq. 25; plan.txt is an aligned table with the Eq. 11 note; timeline.json is a
Chrome trace with one "X" event per simulator event; timeline.svg is
well-formed XML with one event rect per event."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import numpy as np

tool, cluster = sys.argv[1], sys.argv[2]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


d = tempfile.mkdtemp(prefix="hetc_out_")
try:
    out = os.path.join(d, "build")   # not yet existing: the writer creates it
    r = subprocess.run([tool, "output", cluster, out], capture_output=True, text=True)
    check(r.returncode == 0, "writer: " + r.stderr)
    files = sorted(os.listdir(out))
    check(files == ["plan.json", "plan.txt", "timeline.json", "timeline.svg"], f"files {files} (no temp left)")
    cl = json.loads(subprocess.run([tool, "dump", cluster], capture_output=True, text=True, check=True).stdout)

    plan = json.load(open(os.path.join(out, "plan.json")))
    for k in ("version", "model", "cluster", "schedule", "microbatches", "eps", "mesh_order", "t_max",
              "objective", "iteration_time", "throughput", "eta", "profile", "stages"):
        check(k in plan, f"plan.json key {k}")
    check(plan["model"] == 'gpt "tiny"\\test', "string escaping round-trips: %r" % plan.get("model"))
    check(plan["schedule"] == "h1f1b", "schedule name")
    check(len(plan["stages"]) == 3, "three stages")
    for s in plan["stages"]:
        for k in ("index", "layers", "mesh", "device", "submesh", "dp", "tp", "warmup", "delta",
                  "delta_beyond_paper", "t_f", "t_b", "c_next", "mem_pred_bytes", "mem_capacity_bytes"):
            check(k in s, f"stage key {k}")
        mesh = next(m for m in cl["meshes"] if m["name"] == s["mesh"])
        check(s["device"] == mesh["device"] and s["mem_capacity_bytes"] == mesh["mem_bytes"], "stage device")
    # Eq. 25 over every device of the cluster, idle ones with td = 0.
    B = plan["microbatches"]
    td, pk = [], []
    for m in cl["meshes"]:
        peak = m["flops_" + cl["dtype"]]
        used = 0
        for s in plan["stages"]:
            if s["mesh"] == m["name"]:
                nd = s["submesh"][0] * s["submesh"][1]
                td += [B * (s["t_f"] + s["t_b"])] * nd
                pk += [peak] * nd
                used += nd
        td += [0.0] * (m["nodes"] * m["per_node"] - used)
        pk += [peak] * (m["nodes"] * m["per_node"] - used)
    td, pk = np.array(td), np.array(pk)
    eta = 1 - ((td.max() - td) * pk).sum() / (td.max() * pk.sum())
    check(abs(plan["eta"] - eta) < 1e-8, f"eta {plan['eta']} vs {eta}")

    trace = json.load(open(os.path.join(out, "timeline.json")))
    ev = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    nev = json.loads(r.stdout)["events"]
    check(len(ev) == nev, f"{len(ev)} X events vs {nev} written")
    for e in ev:
        check(e["tid"] == (0 if e["name"][0] in "FB" else 1), "compute on tid 0, comm on tid 1")
        check(e["dur"] >= 0 and 0 <= e["pid"] < 3, "event fields")
        if e["name"][0] in "FB":
            check(e["name"] == e["name"][0] + str(e["args"]["mb"]), f"name {e['name']}")
    end_us = max(e["ts"] + e["dur"] for e in ev)
    check(abs(plan["iteration_time"] * 1e6 - end_us) < 1e-3, "iteration time = timeline end")
    check(abs(plan["throughput"]["samples_per_s"] - 64 / plan["iteration_time"]) < 1e-6, "samples/s")

    txt = open(os.path.join(out, "plan.txt")).read().splitlines()
    hdr = next(i for i, l in enumerate(txt) if l.startswith("stage "))
    table = txt[hdr:hdr + 5]   # header, rule, three rows
    check(len({len(l) for l in table}) == 1, "table lines aligned:\n" + "\n".join(table))
    check("K_i" in txt[hdr] and "memory GiB" in txt[hdr], "table columns")
    check(any(l.startswith("note: stage 0") and "Eq. 11" in l for l in txt), "Eq. 11 note")
    check(any("eta (Eq. 25" in l for l in txt), "eta line")

    root = ET.parse(os.path.join(out, "timeline.svg")).getroot()
    rects = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if "ev" in e.get("class", "").split()]
    check(len(rects) == len(ev), f"{len(rects)} event rects vs {len(ev)} events")
    check(any(t.text == "time (ms)" for t in root.iter("{http://www.w3.org/2000/svg}text")), "time axis")

    # Writing again replaces the files in place (rename over).
    r = subprocess.run([tool, "output", cluster, out], capture_output=True, text=True)
    check(r.returncode == 0 and sorted(os.listdir(out)) == files, "rewrite")
    # An unwritable target fails with a message, not a crash.
    r = subprocess.run([tool, "output", cluster, "/proc/hetc_no/such"], capture_output=True, text=True)
    check(r.returncode == 1 and "/proc/hetc_no/such" in r.stderr, "bad folder: " + r.stderr)
    if len(sys.argv) > 3:   # keep a copy for inspection
        shutil.copytree(out, sys.argv[3], dirs_exist_ok=True)
finally:
    shutil.rmtree(d)
print(f"{failures} failures")
sys.exit(1 if failures else 0)
