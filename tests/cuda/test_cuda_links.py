"""Per-link transport in the stage configs (issue 7; docs/STAGE_ABI.md `link`).

gpt_tiny compiled for examples/clusters/tiny_hetero.yaml (host backend: the
config does not depend on the backend).  Each stage binary's embedded
config ("hetc-stage 1" ... "end") must carry exactly one `link PEER
direct|cpu` record per stage it has xfer records with, and the transport
must be the one the cluster YAML gives the link between the two stages'
meshes (read here with PyYAML: `links` entries, else `default_link`;
`transport` defaults to device-direct; two stages on one mesh: direct).
The records are symmetric between the two stages.  Then, compiling from
edited plans (--plan): with every transport of plan.json's cluster.links
flipped the records flip; without cluster.links there are no records (the
runtime then takes the CPU-mediated path).

usage: test_cuda_links.py HETC WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

from cudatest import CLUSTER, MODEL, check, finish, pinned

HETC, WORK = sys.argv[1], sys.argv[2]
ARGS = ["--seq", "64", "--microbatch", "4", "--global-batch", "16", "--threads", "2"]


def compile_(out, extra=()):
    cmd = pinned([HETC, MODEL, CLUSTER, *ARGS, *extra, "-o", out])
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"compile failed:\n{p.stderr[-3000:]}")
    return p.returncode == 0


def configs(out, nstages):
    cfg = []
    for s in range(nstages):
        b = open(os.path.join(out, f"stage_{s}"), "rb").read()
        i = b.index(b"hetc-stage 1\n")
        cfg.append(b[i:b.index(b"\nend\n", i)].decode())
    return cfg


def records(cfg):
    peers = {int(m.group(1)) for m in re.finditer(r"^xfer \d+ \S+ \S+ peer (\d+)", cfg, re.M)}
    links = [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^link (\S+) (\S+)$", cfg, re.M)]
    return peers, links


def yaml_transport(y, a, b):
    if a == b:
        return "direct"
    for l in y.get("links") or []:
        if sorted(l["between"]) == sorted([a, b]):
            t = l.get("transport", "device-direct")
            break
    else:
        t = (y.get("default_link") or {}).get("transport", "device-direct")
    return "direct" if t == "device-direct" else "cpu"


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
y = yaml.safe_load(open(CLUSTER))
out = os.path.join(WORK, "base")
if not compile_(out):
    sys.exit(1)
plan = json.load(open(os.path.join(out, "plan.json")))
meshes = [st["mesh"] for st in plan["stages"]]
S = len(meshes)
check(S >= 2, f"the plan has {S} stage(s): no link to check")
cfg = configs(out, S)
seen = {}
for s in range(S):
    peers, links = records(cfg[s])
    check(sorted(p for p, _ in links) == sorted(peers),
          f"stage {s}: link peers {sorted(p for p, _ in links)} != xfer peers {sorted(peers)}")
    for p, t in links:
        want = yaml_transport(y, meshes[s], meshes[p])
        check(t == want, f"stage {s} ({meshes[s]}) -> stage {p} ({meshes[p]}): link {t}, "
              f"the cluster says {want}")
        seen[(s, p)] = t
for (s, p), t in seen.items():
    check(seen.get((p, s)) == t, f"link {s}-{p} is not symmetric")
print("links:", {f"{meshes[s]}->{meshes[p]}": t for (s, p), t in sorted(seen.items())})

# flipped transports in the plan
flip = json.loads(json.dumps(plan))
for l in flip["cluster"]["links"]:
    l["transport"] = "cpu-mediated" if l["transport"] == "device-direct" else "device-direct"
fp = os.path.join(WORK, "flipped.json")
json.dump(flip, open(fp, "w"), indent=1)
out2 = os.path.join(WORK, "flipped")
if compile_(out2, ["--plan", fp]):
    for s, c in enumerate(configs(out2, S)):
        for p, t in records(c)[1]:
            want = seen[(s, p)] if meshes[s] == meshes[p] else \
                {"direct": "cpu", "cpu": "direct"}[seen[(s, p)]]
            check(t == want, f"flipped plan: stage {s} -> {p}: link {t}, expected {want}")

# a plan without cluster links: no records
bare = json.loads(json.dumps(plan))
del bare["cluster"]["links"]
bp = os.path.join(WORK, "bare.json")
json.dump(bare, open(bp, "w"), indent=1)
out3 = os.path.join(WORK, "bare")
if compile_(out3, ["--plan", bp]):
    for s, c in enumerate(configs(out3, S)):
        check(not records(c)[1], f"plan without cluster.links: stage {s} has link records")

finish(failed="failure(s)")
