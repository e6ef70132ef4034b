"""The analytic cost model against an independent numpy re-derivation of the
documented formulas (docs/CLUSTER.md "Cost model"): every candidate's t_f,
t_b, t_sync, memory, feasibility and pruning, every comm(i, a, b), and the
profiler counters (unique candidates counted by sequence tuples here, not by
hashing)."""
import json
import os
import subprocess
import sys

import numpy as np

tool = sys.argv[1]
GIB = 1024.0 ** 3
YAML = """
dtype: DTYPE
meshes:
  - {name: a, device: A100-40GB, nodes: 2, devices_per_node: 4,
     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: s, device: {base: L4, memory_gb: 6, tflops_bf16: 100}, nodes: 1, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 128, latency_us: 8}}
  - {name: a2, device: A100-40GB, nodes: 2, devices_per_node: 4,
     intra_node: {bandwidth_gbps: 2400, latency_us: 5}, inter_node: {bandwidth_gbps: 200, latency_us: 10}}
links:
  - {between: [a, s], bandwidth_gbps: 5, latency_us: 50, transport: cpu-mediated}
default_link: {bandwidth_gbps: 10, latency_us: 20}
"""
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        if failures < 20:
            print("FAIL:", msg)


def close(a, b, tol=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-30)


tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cost_formula_{os.getpid()}.yaml")
seen_infeasible = seen_feasible = seen_pruned = seen_lower = 0
for dtype in ("bf16", "fp32"):
    open(tmp, "w").write(YAML.replace("DTYPE", dtype))
    cl = json.loads(subprocess.run([tool, "dump", tmp], capture_output=True, text=True, check=True).stdout)
    wbytes = 2 if dtype == "bf16" else 4
    for zero in (0, 1, 2):
        for imb, lower in ((0.0, 0), (4.0, 0), (4.0, 1)):
            r = subprocess.run([tool, "cost", tmp, "7", "11", str(zero), str(imb), str(lower)],
                               capture_output=True, text=True)
            check(r.returncode == 0, r.stderr)
            out = json.loads(r.stdout)
            opt = out["options"]
            ly = out["layers"]
            L = len(ly)
            F = np.array([l["fwd_flops"] for l in ly])
            Bf = np.array([l["bwd_flops"] for l in ly])
            P = np.array([l["param_bytes"] for l in ly])
            A = np.array([l["act_bytes"] for l in ly])
            O = np.array([l["out_bytes"] for l in ly])
            sig = [l["sig"] for l in ly]
            meshes = cl["meshes"]
            peak = [m["flops_" + dtype] for m in meshes]
            capacity = sum(p * m["nodes"] * m["per_node"] for p, m in zip(peak, meshes))
            work = F + Bf
            # device class: equal device figures and links
            def cls(m):
                return tuple(meshes[m][k] for k in ("device", "flops_fp32", "flops_fp16", "flops_bf16", "mem_bytes",
                                                    "hbm_bw", "intra_bw", "intra_lat", "inter_bw", "inter_lat"))
            keys = set()
            pruned = costed = memory = 0
            for st in out["stages"]:
                k, i, a, n, m = st["k"], st["i"], st["mesh"], st["n"], st["m"]
                sl = slice(k - 1, i)
                dev = meshes[a]
                d = n * m
                key = (tuple(sig[sl]), cls(a), n, m)
                first = key not in keys
                keys.add(key)
                ratio = (work[sl].sum() / work.sum()) / (peak[a] * d / capacity)
                if imb > 0 and (ratio > imb or (lower and ratio < 1 / imb)):
                    check(st["t_f"] is None and st["feasible"] == 0, f"pruned {k}..{i} on {a}({n},{m})")
                    pruned += first
                    seen_pruned += 1
                    seen_lower += bool(ratio < 1 / imb)
                    continue
                costed += first
                pk = peak[a] * opt["efficiency"]
                tf = np.maximum(F[sl] / d / pk, (P[sl] + (A[sl] + O[sl]) / d) / dev["hbm_bw"]).sum()
                tb = np.maximum(Bf[sl] / d / pk, (2 * P[sl] + 2 * A[sl] / d) / dev["hbm_bw"]).sum()
                # AdamW: weights w + grads w + fp32 master (4; in fp32 none without ZeRO,
                # but the stage binaries update an fp32 slice under ZeRO)
                # + Adam m, v (8) bytes per parameter; w = 2 (bf16) or 4 (fp32)
                nparam = P[sl].sum() / wbytes
                opt_state = 12 if dtype == "bf16" or zero >= 1 else 8
                per = wbytes + (wbytes / d if zero >= 2 else wbytes) + (opt_state / d if zero >= 1 else opt_state)
                mstat = nparam * per + opt["runtime_reserve_bytes"]
                mact = A[sl].sum() / d
                if d > 1:
                    bw, lat = (dev["intra_bw"], dev["intra_lat"]) if n == 1 else (dev["inter_bw"], dev["inter_lat"])
                    one = (d - 1) / d * P[sl].sum() / bw + (d - 1) * lat
                    # ZeRO-2: each microbatch's backward reduce-scatters its gradients;
                    # the all-gather of the parameters once per iteration
                    tsync = one if zero >= 2 else 2 * one
                    tb += one if zero >= 2 else 0
                else:
                    tsync = 0.0
                feas = int(mstat + mact <= dev["mem_bytes"])
                memory += first and not feas
                seen_feasible += feas
                seen_infeasible += not feas
                tag = f"{dtype} zero={zero} imb={imb}/{lower} {k}..{i} mesh {a} ({n},{m})"
                check(close(st["t_f"], tf), f"{tag}: t_f {st['t_f']} vs {tf}")
                check(close(st["t_b"], tb), f"{tag}: t_b {st['t_b']} vs {tb}")
                check(close(st["t_sync"], tsync), f"{tag}: t_sync {st['t_sync']} vs {tsync}")
                check(close(st["mem_static"], mstat), f"{tag}: mem_static {st['mem_static']} vs {mstat}")
                check(close(st["mem_act"], mact), f"{tag}: mem_act")
                check(st["feasible"] == feas, f"{tag}: feasible {st['feasible']} vs {feas}")
                check(st["dp"] == d and st["tp"] == 1, f"{tag}: dp x tp")
            c = out["counters"]
            check(c["total"] == len(out["stages"]), f"total {c['total']} vs {len(out['stages'])}")
            check(c["unique"] == len(keys), f"unique {c['unique']} vs {len(keys)}")
            check(c["duplicates"] == c["total"] - len(keys), "duplicates")
            check(c["pruned_imbalance"] == pruned, f"pruned {c['pruned_imbalance']} vs {pruned}")
            check(c["costed"] == costed, f"costed {c['costed']} vs {costed}")
            check(c["pruned_memory"] == memory, f"memory {c['pruned_memory']} vs {memory}")
            # comm(i, a, b)
            links = {frozenset((l["a"], l["b"])): l for l in cl["links"]}
            for e in out["comm"]:
                i, a, b = e["i"], e["a"], e["b"]
                if i == L:
                    want = 0.0
                elif a == b:
                    m = meshes[a]
                    bw, lat = (m["inter_bw"], m["inter_lat"]) if m["nodes"] > 1 else (m["intra_bw"], m["intra_lat"])
                    want = O[i - 1] / bw + lat
                else:
                    l = links[frozenset((a, b))]
                    want = O[i - 1] / l["bw"] + l["lat"] + (2 * O[i - 1] / opt["pcie_bw"] if l["cpu_mediated"] else 0)
                check(close(e["t"], want), f"comm({i},{a},{b}) {e['t']} vs {want}")
os.unlink(tmp)
# The instance must exercise both sides of each test.
check(seen_feasible and seen_infeasible, f"feasible {seen_feasible} / infeasible {seen_infeasible} both seen")
check(seen_pruned, "imbalance pruning seen")
check(seen_lower, "lower-side imbalance pruning seen")

print(f"{failures} failures")
sys.exit(1 if failures else 0)
