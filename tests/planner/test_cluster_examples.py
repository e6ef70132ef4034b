"""Every examples/clusters/*.yaml loads, and the loader's view (dumped by
cluster_tool) equals what PyYAML reads from the same file, with units
converted here independently (Gbit/s -> bytes/s, us -> s, GiB -> bytes).
Catalog spot checks against the datasheet figures quoted in issue 5."""
import glob
import itertools
import json
import os
import subprocess
import sys

import yaml

tool, src = sys.argv[1], sys.argv[2]
GIB = 1024.0 ** 3
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def close(a, b):
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1e-300)


files = sorted(glob.glob(os.path.join(src, "examples", "clusters", "*.yaml")))
check(len(files) >= 4, "at least four example clusters")
for path in files:
    r = subprocess.run([tool, "dump", path], capture_output=True, text=True)
    check(r.returncode == 0, f"{path} loads: {r.stderr}")
    if r.returncode:
        continue
    got = json.loads(r.stdout)
    doc = yaml.safe_load(open(path))
    name = os.path.basename(path)
    check(got["dtype"] == doc.get("dtype", "bf16"), f"{name}: dtype")
    check(got["name"] == doc.get("name", os.path.splitext(name)[0]), f"{name}: name")
    check(len(got["meshes"]) == len(doc["meshes"]), f"{name}: mesh count")
    total = 0
    for gm, dm in zip(got["meshes"], doc["meshes"]):
        check(gm["name"] == dm["name"], f"{name}: mesh name")
        dev = dm["device"]
        if isinstance(dev, str):
            check(gm["device"].lower() == dev.lower(), f"{name}: device {gm['device']} vs {dev}")
        else:
            if "memory_gb" in dev:
                check(close(gm["mem_bytes"], dev["memory_gb"] * GIB), f"{name}: memory override")
        check(gm["nodes"] == dm["nodes"] and gm["per_node"] == dm["devices_per_node"], f"{name}: shape")
        total += dm["nodes"] * dm["devices_per_node"]
        for key in ("intra", "inter"):
            net = dm.get(key + "_node")
            if net is None:
                check(gm[key + "_bw"] == 0, f"{name}: {key} absent -> 0")
                continue
            check(close(gm[key + "_bw"], net["bandwidth_gbps"] * 1e9 / 8), f"{name}: {key} bandwidth")
            check(close(gm[key + "_lat"], net.get("latency_us", 0) * 1e-6), f"{name}: {key} latency")
    check(got["total_devices"] == total, f"{name}: total devices")
    # Every pair of meshes is linked exactly once: explicit links as written,
    # the others by default_link.
    names = [m["name"] for m in doc["meshes"]]
    explicit = {}
    for l in doc.get("links", []) or []:
        explicit[frozenset(names.index(x) for x in l["between"])] = l
    pairs = {}
    for l in got["links"]:
        key = frozenset((l["a"], l["b"]))
        check(key not in pairs, f"{name}: pair linked twice")
        pairs[key] = l
    for a, b in itertools.combinations(range(len(names)), 2):
        key = frozenset((a, b))
        check(key in pairs, f"{name}: {names[a]}-{names[b]} linked")
        if key not in pairs:
            continue
        want = explicit.get(key, doc.get("default_link"))
        g = pairs[key]
        check(close(g["bw"], want["bandwidth_gbps"] * 1e9 / 8), f"{name}: link bandwidth")
        check(close(g["lat"], want.get("latency_us", 0) * 1e-6), f"{name}: link latency")
        check(g["cpu_mediated"] == (want.get("transport") == "cpu-mediated"), f"{name}: transport")

# Catalog spot checks: datasheet figures quoted in issue 5 (dense tensor rates).
spot = {
    "A100-40GB": (19.5e12, 312e12, 312e12, 40, 1555e9),
    "A100-80GB": (19.5e12, 312e12, 312e12, 80, 2039e9),
    "V100-32GB": (15.7e12, 125e12, 0, 32, 900e9),
    "H100-SXM": (67e12, 989e12, 989e12, 80, 3350e9),
}
yml = "dtype: fp32\nmeshes:\n" + "".join(
    f"  - {{name: m{i}, device: {d}, nodes: 1, devices_per_node: 1}}\n" for i, d in enumerate(spot))
yml += "default_link: {bandwidth_gbps: 1}\n"
tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"catalog_spot_{os.getpid()}.yaml")
open(tmp, "w").write(yml)
r = subprocess.run([tool, "dump", tmp], capture_output=True, text=True)
os.unlink(tmp)
check(r.returncode == 0, "catalog spot cluster loads: " + r.stderr)
if r.returncode == 0:
    for m, (d, (f32, f16, bf16, mem, hbm)) in zip(json.loads(r.stdout)["meshes"], spot.items()):
        check(close(m["flops_fp32"], f32) and close(m["flops_fp16"], f16), f"{d}: flops")
        check(m["flops_bf16"] == bf16 or close(m["flops_bf16"], bf16), f"{d}: bf16")
        check(close(m["mem_bytes"], mem * GIB) and close(m["hbm_bw"], hbm), f"{d}: memory / HBM")

print(f"{len(files)} example clusters, {failures} failures")
sys.exit(1 if failures else 0)
