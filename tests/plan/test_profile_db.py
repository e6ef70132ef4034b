"""`hetc plan --profile-db` (docs/PROFILE_DB.md).

Oracles: the analytic model's own figures written as a database
(--write-profile-db) must give the same plan as the analytic model; the same
database with one device type's times doubled must give stage times equal to
the sum of the database entries over each stage's layers (exactly, in the
oracle's summation order) and must not give that device's mesh more work;
malformed databases must fail with the file, the JSON path and what was
expected.
usage: test_profile_db.py HETC SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
# Two meshes of two device types with equal peaks and fast links, so the
# split follows compute (the example clusters' slow links make gpt_tiny
# comm-bound: its stage placement would not see a compute change).
CLUSTER_YAML = """name: fast-pair
dtype: bf16
meshes:
  - {name: a, device: A100-40GB, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 2400, latency_us: 1}}
  - {name: b, device: A100-80GB, nodes: 1, devices_per_node: 2, intra_node: {bandwidth_gbps: 2400, latency_us: 1}}
links:
  - {between: [a, b], bandwidth_gbps: 2400, latency_us: 1, transport: device-direct}
"""
# --precision cluster-dtype: the database mechanism at the cluster's bf16 (at fp32,
# the default, compute weighs more and the plan takes TP 2, which the written
# database has no entries for: those layers would be costed analytically)
COMMON = ["--seq", "64", "--microbatch", "16", "--global-batch", "256", "--threads", "2",
          "--precision", "cluster-dtype"]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)


def plan(tmp, tag, *extra):
    out = os.path.join(tmp, tag)
    p = subprocess.run([HETC, "plan", MODEL, CLUSTER, "-o", out, *COMMON, *extra],
                       capture_output=True, text=True, timeout=300)
    pj = json.load(open(os.path.join(out, "plan.json"))) if p.returncode == 0 else None
    return p, pj


with tempfile.TemporaryDirectory() as tmp:
    CLUSTER = os.path.join(tmp, "fast_pair.yaml")
    with open(CLUSTER, "w") as f:
        f.write(CLUSTER_YAML)
    dbp = os.path.join(tmp, "db.json")
    p0, pj0 = plan(tmp, "analytic", "--write-profile-db", dbp)
    check(p0.returncode == 0 and os.path.exists(dbp), f"--write-profile-db: {p0.stderr}")
    db = json.load(open(dbp))
    sigs = db["layers"]
    check(db["format"] == "hetc-profile-db" and len(db["entries"]) > 0, "written database shape")

    # 1. the analytic figures read back: the same plan, every layer from the database
    p1, pj1 = plan(tmp, "same", "--profile-db", dbp)
    check(p1.returncode == 0, f"--profile-db (analytic figures): {p1.stderr}")
    if pj1:
        check(pj1["objective"] == pj0["objective"], f"objective {pj1['objective']} != analytic {pj0['objective']}")
        check([(s["mesh"], s["layers"], s["submesh"]) for s in pj1["stages"]] ==
              [(s["mesh"], s["layers"], s["submesh"]) for s in pj0["stages"]], "same stages")
    m = re.search(r"^profile db .*costed candidates: (\d+) from the database, (\d+) mixed, (\d+) analytic",
                  p1.stderr, re.M)
    check(m is not None and int(m.group(1)) > 0 and int(m.group(2)) == 0 and int(m.group(3)) == 0,
          f"every costed candidate from the database: {m and m.group(0)}")

    # 2. one device type twice as slow
    cl_dev = {m["name"]: m["device"] for m in pj0["cluster"]["meshes"]}
    # slow down the mesh that holds the most layers in the analytic plan
    held = {}
    for s in pj0["stages"]:
        held[s["mesh"]] = held.get(s["mesh"], 0) + s["layers"][1] - s["layers"][0] + 1
    slow_mesh = max(sorted(held), key=lambda m: held[m])
    slow_dev = cl_dev.get(slow_mesh)
    check(slow_dev is not None, f"device of mesh {slow_mesh} in {CLUSTER}: {cl_dev}")
    for e in db["entries"]:
        if e["device"] == slow_dev:
            e["t_f"] *= 2
            e["t_b"] *= 2
    db2 = os.path.join(tmp, "db2.json")
    json.dump(db, open(db2, "w"))
    p2, pj2 = plan(tmp, "slow", "--profile-db", db2)
    check(p2.returncode == 0, f"--profile-db (2x slower {slow_dev}): {p2.stderr}")
    if pj2:
        # an entry per intra-op plan of a submesh: the stage's (dp, tp) picks it
        index = {(e["device"], e["layer_sig"], tuple(e["submesh"]), e["dp"], e["tp"]): e
                 for e in db["entries"]}
        for s in pj2["stages"]:
            dev = cl_dev[s["mesh"]]
            tf = tb = 0.0
            for l in range(s["layers"][0], s["layers"][1] + 1):
                e = index[(dev, sigs[l - 1], tuple(s["submesh"]), s["dp"], s["tp"])]
                tf += e["t_f"]
                tb += e["t_b"]
            check(s["t_f"] == tf and s["t_b"] == tb,
                  f"stage {s['layers']} on {s['mesh']}: t_f {s['t_f']!r} t_b {s['t_b']!r}, "
                  f"database sums {tf!r} {tb!r}")

        def work(pj, mesh):
            return sum(s["layers"][1] - s["layers"][0] + 1 for s in pj["stages"] if s["mesh"] == mesh)
        w0, w2 = work(pj0, slow_mesh), work(pj2, slow_mesh)
        print(f"layers on {slow_mesh} ({slow_dev}): analytic {w0}, 2x slower {w2}; objective "
              f"{pj0['objective']:.6g} -> {pj2['objective']:.6g}")
        check(w2 < w0, f"a 2x slower {slow_dev} keeps {w2} layers on {slow_mesh} (analytic: {w0})")
        check(pj2["objective"] > pj0["objective"], "slower devices cannot make the plan faster")

    # 3. partial database: drop one device type: those candidates are analytic
    db3 = dict(db)
    db3["entries"] = [e for e in db["entries"] if e["device"] != slow_dev]
    p3path = os.path.join(tmp, "db3.json")
    json.dump(db3, open(p3path, "w"))
    p3, pj3 = plan(tmp, "partial", "--profile-db", p3path)
    m = re.search(r"costed candidates: (\d+) from the database, (\d+) mixed, (\d+) analytic", p3.stderr)
    check(p3.returncode == 0 and m and int(m.group(1)) > 0 and int(m.group(3)) > 0,
          f"partial database counts: {m and m.group(0)} {p3.stderr[-300:]}")
    if pj3:
        check(pj3["objective"] == pj0["objective"], "analytic fallback for the missing device gives "
              "the analytic plan")

    # 4. another microbatch: every entry skipped, all analytic
    p4 = subprocess.run([HETC, "plan", MODEL, CLUSTER, "-o", os.path.join(tmp, "mb"), "--seq", "64",
                         "--microbatch", "8", "--global-batch", "256", "--profile-db", dbp,
                         "--precision", "fp32"],
                        capture_output=True, text=True, timeout=300)
    check(p4.returncode == 0 and re.search(r"profile db .*: 0 entries \(\d+ of another", p4.stderr),
          f"context filter: {p4.stderr[-400:]}")

    # 5. malformed files: file, JSON path, expectation
    e0 = json.load(open(dbp))["entries"][0]

    def bad(name, doc, want):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        p = subprocess.run([HETC, "plan", MODEL, CLUSTER, "-o", os.path.join(tmp, "bad"), *COMMON,
                            "--profile-db", path], capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and path in p.stderr and re.search(want, p.stderr),
              f"{name}: exit {p.returncode}, want /{want}/ in: {p.stderr.strip()}")

    def with_entry(**kw):
        e = dict(e0)
        for k, v in kw.items():
            if v is None:
                e.pop(k)
            else:
                e[k] = v
        return {"format": "hetc-profile-db", "version": 1, "entries": [dict(e0), e]}

    bad("syntax.json", '{"format": "hetc-profile-db",\n "version": 1,\n "entries": [ }', r"line 3: not valid JSON")
    bad("format.json", {"format": "x", "version": 1, "entries": []}, r"\$\.format: expected \"hetc-profile-db\"")
    bad("version.json", {"format": "hetc-profile-db", "version": 2, "entries": []}, r"\$\.version: expected 1")
    bad("noentries.json", {"format": "hetc-profile-db", "version": 1}, r"\$\.entries: expected an array")
    bad("tf.json", with_entry(t_f="fast"), r"entries\[1\]\.t_f: expected a non-negative number, got a string")
    bad("neg.json", with_entry(t_b=-1), r"entries\[1\]\.t_b: expected a non-negative number, got -1")
    bad("sig.json", with_entry(layer_sig="12ab"), r"entries\[1\]\.layer_sig: expected a hexadecimal string")
    bad("sub.json", with_entry(submesh=[1]), r"entries\[1\]\.submesh: expected \[n, m\]")
    bad("sub0.json", with_entry(submesh=[1, 0]), r"entries\[1\]\.submesh\[1\]: expected an integer >= 1, got 0")
    bad("dp.json", with_entry(dp=3), r"entries\[1\]\.dp: expected dp x tp = n x m")
    bad("missing.json", with_entry(device=None), r"entries\[1\]\.device: expected a non-empty string, got nothing")
    bad("mem.json", with_entry(mem_act=None), r"entries\[1\]\.mem_act: expected mem_static and mem_act together")
    bad("typo.json", with_entry(t_fwd=1.0), r"entries\[1\]\.t_fwd: unknown key")
    bad("dtype.json", with_entry(dtype="int8"), r"entries\[1\]\.dtype: expected \"bf16\", \"fp16\" or \"fp32\"")
    bad("dup.json", {"format": "hetc-profile-db", "version": 1, "entries": [e0, e0]},
        r"entries\[1\]: duplicate of an earlier entry")
    bad("link.json", {"format": "hetc-profile-db", "version": 1, "entries": [],
                      "links": [{"between": ["a100"], "bandwidth": 1e9, "latency": 0}]},
        r"links\[0\]\.between: expected \[\"mesh\", \"mesh\"\]")
    bad("linkbw.json", {"format": "hetc-profile-db", "version": 1, "entries": [],
                        "links": [{"between": ["a100", "v100"], "bandwidth": 0, "latency": 0}]},
        r"links\[0\]\.bandwidth: expected a positive number, got 0")
    p = subprocess.run([HETC, "plan", MODEL, CLUSTER, "-o", os.path.join(tmp, "bad"), *COMMON,
                        "--profile-db", os.path.join(tmp, "absent.json")], capture_output=True, text=True)
    check(p.returncode != 0 and "absent.json: cannot open" in p.stderr, f"missing file: {p.stderr}")

    # 6. a measured link replaces the cluster's: a much slower cross link moves the plan
    cross = [m for m in cl_dev]
    if len(cross) == 2:
        db6 = json.load(open(dbp))
        db6["links"] = [{"between": cross, "bandwidth": 1e3, "latency": 1.0}]
        p6path = os.path.join(tmp, "db6.json")
        json.dump(db6, open(p6path, "w"))
        p6, pj6 = plan(tmp, "link", "--profile-db", p6path)
        check(p6.returncode == 0 and pj6 and pj6["objective"] > pj0["objective"] + 1.0,
              f"a 1 s latency cross link raises the objective: {p6.stderr[-300:]}")

print("FAILED" if fails else "OK", len(fails))
sys.exit(1 if fails else 0)
