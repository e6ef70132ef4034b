"""Modules and layers on the committed exports (tests/models, examples/gpt_tiny).

Oracles: the export configs (n_layer, n_embd, batch, seq and the list of
initializers that are trained parameters, written by the exporter), and the
ONNX initializer sizes read here with the onnx package.
usage: test_modules_layers.py PLAN_IR_TOOL SOURCE_DIR"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import onnx

TOOL, SRC = sys.argv[1], sys.argv[2]
PARAM_BYTES = 2  # bf16/fp16 training dtype (the tool's default)
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)


def run_tool(model, batch, seq, target=0):
    p = subprocess.run([TOOL, model, str(batch), str(seq), str(target), str(PARAM_BYTES)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"plan_ir_tool failed on {model}: {p.stderr}")
    return json.loads(p.stdout)


def init_numel(model_path):
    m = onnx.load(model_path, load_external_data=False)
    return {t.name: int(np.prod(t.dims)) if len(t.dims) else 1 for t in m.graph.initializer}


configs = sorted(glob.glob(os.path.join(SRC, "tests", "models", "*.json")))
configs += [os.path.join(SRC, "examples", "gpt_tiny.json")]
ran = 0
for cfg_path in configs:
    if not os.path.exists(cfg_path):
        continue
    cfg = json.load(open(cfg_path))
    if "n_layer" not in cfg:
        continue
    for fname in cfg.get("onnx", []):
        model = os.path.join(os.path.dirname(cfg_path), fname)
        if not os.path.exists(model):
            continue
        ran += 1
        name = fname
        b, T, d, n_layer = cfg["batch"], cfg["seq"], cfg["n_embd"], cfg["n_layer"]
        r = run_tool(model, b, T)
        nodes = r["nodes"]
        live = [i for i, n in enumerate(nodes) if not n["dead"]]
        mods = r["modules"]
        # modules: one per transformer block (the config says how many)
        check(len(mods) == n_layer, f"{name}: {len(mods)} modules, config n_layer = {n_layer}")
        check(len({m["nodes"] for m in mods}) == 1, f"{name}: modules of different sizes")
        ids = sorted({nodes[i]["module"] for i in live if nodes[i]["module"] >= 0})
        check(ids == list(range(len(mods))), f"{name}: module ids on nodes {ids}")
        # embedding and head outside every module
        for i in live:
            if nodes[i]["op"] in ("Embedding", "Gather"):
                check(nodes[i]["module"] == -1, f"{name}: embedding node {i} in module {nodes[i]['module']}")
        last_mod_end = max(m["last"] for m in mods) if mods else -1
        tail = [i for i in live if i > last_mod_end]
        check(any(nodes[i]["op"] in ("LayerNorm", "RMSNorm") for i in tail),
              f"{name}: final norm not outside the modules")
        check(any(nodes[i]["heavy"] for i in tail), f"{name}: head not outside the modules")
        check(nodes[live[-1]]["module"] == -1, f"{name}: the output node is inside a module")
        # each module holds exactly one Attention (it is a whole block)
        for k, m in enumerate(mods):
            att = sum(1 for i in live if m["first"] <= i <= m["last"] and nodes[i]["op"] == "Attention")
            check(att == 1, f"{name}: module {k} holds {att} Attention nodes")

        layers = r["layers"]
        L = len(layers)
        k = r["per_module"]
        check(k >= 4, f"{name}: {k} layers per block by default (want >= 4)")
        check(L == k * n_layer + r["outside_layers"], f"{name}: {L} layers != {k} x {n_layer} + outside")
        # every live node in exactly one layer, layers contiguous and in order
        covered = []
        for li, l in enumerate(layers):
            covered += [i for i in live if l["first"] <= i <= l["last"]]
            for i in live:
                if l["first"] <= i <= l["last"]:
                    check(nodes[i]["layer"] == li + 1, f"{name}: node {i} layer id {nodes[i]['layer']} != {li + 1}")
        check(covered == live, f"{name}: layers do not partition the live nodes")
        # parameters: each counted once, total = the trained initializers' bytes
        numel = init_numel(model)
        trained = cfg["initializers"][fname].keys()
        want = sum(numel[n] for n in trained) * PARAM_BYTES
        got = sum(l["param"] for l in layers)
        check(got == want, f"{name}: parameter bytes {got} != initializers {want}")
        check(set(r["params"]) == set(trained), f"{name}: IR parameters differ from the trained initializers")
        # boundary of a block cut: the residual stream, batch x seq x hidden x 4 bytes
        for m in mods:
            lend = [li for li, l in enumerate(layers) if l["last"] == m["last"]]
            check(len(lend) == 1, f"{name}: module ending at node {m['last']} does not end a layer")
            if lend:
                cutb = layers[lend[0]]["out"]
                check(cutb == b * T * d * 4, f"{name}: block cut carries {cutb} bytes, want {b * T * d * 4}")
        check(layers[-1]["out"] == 0, f"{name}: last layer has a boundary")
        # equal blocks give equal layer signatures; the embedding layer differs
        block_layers = [[l for l in layers if m["first"] <= l["first"] and l["last"] <= m["last"]] for m in mods]
        for bl in block_layers:
            check(len(bl) == k, f"{name}: a block split into {len(bl)} layers, want {k}")
            check([l["sig"] for l in bl] == [l["sig"] for l in block_layers[0]], f"{name}: block signatures differ")
        check(layers[0]["sig"] not in {l["sig"] for l in block_layers[0]}, f"{name}: embedding sig equals a block sig")
        # heavy ops per layer bounded; FLOPs: heavy per-node sum equals the layer sums
        for l in layers:
            check(l["heavy"] <= max(2, r["heavy_bound"]), f"{name}: layer with {l['heavy']} heavy ops")
        fsum = sum(nodes[i]["fwd"] for i in live)
        check(abs(fsum - sum(l["fwd"] for l in layers)) <= 1e-9 * fsum, f"{name}: forward FLOPs not conserved")
        # Linear FLOPs against 2 * tokens * K * N (+ tokens * N with a bias) from the
        # weight shapes stored in the ONNX file
        dims = {t.name: list(t.dims) for t in onnx.load(model, load_external_data=False).graph.initializer}
        nlin = 0
        for i in live:
            n = nodes[i]
            if n["op"] == "Linear" and n["ins"][1] in dims and len(dims[n["ins"][1]]) == 2:
                K, N = dims[n["ins"][1]]
                want_f = 2 * b * T * K * N + (b * T * N if len(n["ins"]) > 2 and n["ins"][2] else 0)
                check(n["fwd"] == want_f, f"{name}: Linear node {i} fwd {n['fwd']} != {want_f}")
                nlin += 1
        check(nlin >= 4 * n_layer, f"{name}: only {nlin} Linear nodes with a weight initializer")
        # --layers: the target count with the same number of outside layers
        target = 3 * n_layer + r["outside_layers"]
        r3 = run_tool(model, b, T, target)
        check(len(r3["layers"]) == target and r3["per_module"] == 3,
              f"{name}: --layers {target} gave {len(r3['layers'])} ({r3['per_module']} per block)")
        # fewer layers than blocks: whole blocks grouped (coarse granularity)
        rc = run_tool(model, b, T, 1 + r["outside_layers"])
        check(len(rc["layers"]) == 1 + r["outside_layers"] and
              sum(l["param"] for l in rc["layers"]) == sum(l["param"] for l in layers),
              f"{name}: --layers {1 + r['outside_layers']} gave {len(rc['layers'])} layers")
        print(f"ok   {name}: {len(mods)} modules x {mods[0]['nodes'] if mods else 0} nodes, "
              f"{L} layers, params {got} B" if not fails else f"---- {name}")
if ran == 0:
    print("FAIL: no committed models found")
    sys.exit(1)
print(f"{ran} models, {len(fails)} failures")
sys.exit(1 if fails else 0)
