"""The planner's time model under --precision bf16-mixed (issue 17): the
FLOPs of the Linears the mixed-precision pass runs in bf16 are timed at the
device's bf16 peak, the rest at its fp32 peak (docs/PLANNER.md "Precision
and the arena").

Oracle: the weight GEMMs of examples/gpt_tiny.onnx counted here from the
ONNX file with the onnx package (every MatMul / Gemm whose second operand is
an initializer, directly or through a Transpose: 2 M K N FLOPs, M = rows x
seq, plus M N for a bias Add that follows it; the attention MatMuls of two
activations stay fp32, inside the Attention op), independent of hetc's
layer / op-cost code.  On a one-device cluster whose HBM is so fast that
every layer is compute-bound, one stage holds every layer, so

    t_f(fp32) - t_f(bf16-mixed) = F16 x (1 / P32 - 1 / P16)
    t_b(fp32) - t_b(bf16-mixed) = 2 F16 x (1 / P32 - 1 / P16)  (dX and dW)

with P = tflops x --efficiency (0.5).  A device without bf16 tensor cores
(tflops_bf16 0, a V100's) plans both precisions alike; the seed planners'
costs (--planner=uniform) follow the same rule; plan.txt says so.

The gradient wire (--grad-reduce-dtype bf16): one stage at DP 2 on a mesh
with zero link latency, ZeRO 0: the simulated `sync` event is the ring
all-reduce 2 (dp-1)/dp x 4 N / bw with N the float initializers' elements
of the ONNX file, and exactly half of it over the bf16 wire; plan.json
says "grad_reduce_dtype": "bf16", plan.txt says it; without bf16-mixed the
option is refused.

The TP wire (--tp-reduce-dtype bf16): one stage at TP 2 on a link of zero
latency; the TP all-reduce time (t_f / t_b less the same plan's on a link
1e5 x faster) over the bf16 wire is half the fp32 wire's; plan.json says
"tp_reduce_dtype": "bf16".

usage: test_bf16_time.py HETC SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import onnx

hetc, src = sys.argv[1], sys.argv[2]
model = os.path.join(src, "examples", "gpt_tiny.onnx")
ROWS, SEQ, EFF = 4, 64, 0.5
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg, flush=True)
    return cond


def bf16_gemm_flops(path, m_rows):
    g = onnx.load(path).graph
    inits = {i.name: list(i.dims) for i in g.initializer}
    transposed = {n.output[0]: n.input[0] for n in g.node
                  if n.op_type == "Transpose" and n.input[0] in inits}
    users = {}
    for n in g.node:
        for x in n.input:
            users.setdefault(x, []).append(n)
    total = 0
    for n in g.node:
        if n.op_type not in ("MatMul", "Gemm"):
            continue
        w = n.input[1]
        if w in inits:
            k, nn = inits[w][-2], inits[w][-1]
            if n.op_type == "Gemm":
                ta = [a.i for a in n.attribute if a.name == "transB"]
                if ta and ta[0]:
                    k, nn = nn, k
        elif w in transposed:
            k, nn = inits[transposed[w]][::-1][-2:]
        else:
            continue  # activation x activation: attention, fp32
        total += 2 * m_rows * k * nn
        has_bias = (n.op_type == "Gemm" and len(n.input) > 2) or any(
            u.op_type == "Add" and any(len(inits.get(x, [])) == 1 for x in u.input)
            for u in users.get(n.output[0], []))
        total += m_rows * nn if has_bias else 0
    return total


CLUSTER = """name: bf16-time
dtype: DTYPE
meshes:
  - name: g
    device: {base: A100-80GB, name: compute-bound, tflops_fp32: 10, tflops_bf16: BF16,
             hbm_gbytes_s: 1000000}
    nodes: 1
    devices_per_node: 1
"""


def plan(work, bf16_tflops, precision, *extra):
    yml = os.path.join(work, f"c{bf16_tflops}.yaml")
    open(yml, "w").write(CLUSTER.replace("BF16", str(bf16_tflops))
                         .replace("DTYPE", "bf16" if bf16_tflops else "fp32"))
    out = os.path.join(work, f"p_{bf16_tflops}_{precision}_{len(extra)}")
    p = subprocess.run([hetc, "plan", model, yml, "-o", out, "--seq", str(SEQ), "--microbatch",
                        str(ROWS), "--global-batch", str(ROWS), "--precision", precision,
                        "--efficiency", str(EFF), *extra],
                       capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, f"hetc plan {precision} {extra}: exit {p.returncode}: "
                                    f"{p.stderr[-400:]}"):
        return None, ""
    j = json.load(open(os.path.join(out, "plan.json")))
    st = j["stages"]
    check(len(st) == 1 and st[0]["dp"] == 1 and st[0]["tp"] == 1,
          f"{precision}: expected one DP1xTP1 stage, got {[(s['layers'], s['dp'], s['tp']) for s in st]}")
    return (st[0]["t_f"], st[0]["t_b"]), open(os.path.join(out, "plan.txt")).read()


F16 = bf16_gemm_flops(model, ROWS * SEQ)
P32, P16 = 10e12 * EFF, 40e12 * EFF
want = F16 * (1 / P32 - 1 / P16)
with tempfile.TemporaryDirectory() as work:
    for label, extra in (("hapt", ()), ("uniform", ("--planner=uniform",))):
        t32, _ = plan(work, 40, "fp32", *extra)
        t16, txt = plan(work, 40, "bf16-mixed", *extra)
        if t32 and t16:
            df, db = t32[0] - t16[0], t32[1] - t16[1]
            check(abs(df - want) <= 1e-6 * want,
                  f"{label}: t_f fp32 - bf16-mixed = {df:.9g} s, oracle {want:.9g} s")
            check(abs(db - 2 * want) <= 1e-6 * want,
                  f"{label}: t_b fp32 - bf16-mixed = {db:.9g} s, oracle {2 * want:.9g} s")
            print(f"{label}: bf16 GEMM FLOPs (onnx count) {F16}; t_f {t32[0]:.6g} -> {t16[0]:.6g} s, "
                  f"t_b {t32[1]:.6g} -> {t16[1]:.6g} s (oracle difference {want:.6g} / "
                  f"{2 * want:.6g})", flush=True)
        if label == "hapt":
            check("bf16 peak" in txt, "plan.txt does not say the bf16 Linears use the bf16 peak")
    # no bf16 tensor cores: bf16-mixed is planned at the fp32 peak, like fp32
    t32, _ = plan(work, 0, "fp32")
    t16, _ = plan(work, 0, "bf16-mixed")
    if t32 and t16:
        check(t32 == t16, f"tflops_bf16 0: fp32 {t32} != bf16-mixed {t16}")

    # the bf16 gradient wire: the DP all-reduce's bytes halve
    import numpy as np
    m = onnx.load(model)
    N = sum(int(np.prod(i.dims)) for i in m.graph.initializer if i.data_type == 1)
    BW = 10e9 / 8  # 10 Gbit/s
    dpy = os.path.join(work, "dp.yaml")
    open(dpy, "w").write("name: dp-wire\ndtype: bf16\nmeshes:\n  - name: g\n    device: A100-80GB\n"
                         "    nodes: 1\n    devices_per_node: 2\n"
                         "    intra_node: {bandwidth_gbps: 10, latency_us: 0}\n")
    sync = {}
    for wire in ("fp32", "bf16"):
        out = os.path.join(work, "dp_" + wire)
        p = subprocess.run([hetc, "plan", model, dpy, "-o", out, "--seq", str(SEQ), "--microbatch",
                            str(ROWS), "--global-batch", str(2 * ROWS), "--precision", "bf16-mixed",
                            "--grad-reduce-dtype", wire, "--max-tp", "1", "--zero", "0"],
                           capture_output=True, text=True, timeout=600)
        if not check(p.returncode == 0, f"dp plan, {wire} wire: exit {p.returncode}: {p.stderr[-300:]}"):
            continue
        j = json.load(open(os.path.join(out, "plan.json")))
        check([s["dp"] for s in j["stages"]] == [2], f"{wire} wire: stages' dp {[s['dp'] for s in j['stages']]}")
        check(j.get("grad_reduce_dtype") == ("bf16" if wire == "bf16" else None),
              f"{wire} wire: plan.json grad_reduce_dtype {j.get('grad_reduce_dtype')}")
        check(("gradients reduced in bf16" in open(os.path.join(out, "plan.txt")).read()) == (wire == "bf16"),
              f"{wire} wire: plan.txt's bf16 gradient line")
        ev = [e for e in json.load(open(os.path.join(out, "timeline.json")))["traceEvents"]
              if e.get("name") == "sync"]
        sync[wire] = ev[0]["dur"] * 1e-6 if ev else None
    want32 = 2 * (2 - 1) / 2 * 4 * N / BW
    if check(None not in sync.values() and len(sync) == 2, f"sync events {sync}"):
        check(abs(sync["fp32"] - want32) <= 1e-9 * want32,
              f"fp32 wire sync {sync['fp32']:.9g} s, oracle {want32:.9g} s")
        check(abs(sync["bf16"] - want32 / 2) <= 1e-9 * want32,
              f"bf16 wire sync {sync['bf16']:.9g} s, oracle {want32 / 2:.9g} s")
        print(f"DP 2 sync: fp32 wire {sync['fp32'] * 1e3:.4f} ms, bf16 wire {sync['bf16'] * 1e3:.4f} ms "
              f"(oracle from {N} ONNX parameters: {want32 * 1e3:.4f} / {want32 / 2e-3:.4f})", flush=True)
    # the bf16 TP wire (--tp-reduce-dtype bf16): one stage at TP 2 (one row per step: no DP
    # rank without a row, --max-stages 1) on a link of zero latency; the TP all-reduces' time
    # is each plan's t_f / t_b less that of the same plan on a link 1e5 x faster (compute
    # alone, to 1e-5), and over the bf16 wire it must be half of the fp32 wire's
    tpt = {}
    for wire, gbps in (("fp32", 100), ("bf16", 100), ("fast", 10000000)):
        y = os.path.join(work, f"tp_{wire}.yaml")
        open(y, "w").write("name: tp-wire\ndtype: bf16\nmeshes:\n  - name: g\n"
                           "    device: {base: A100-80GB, name: c, tflops_fp32: 10, tflops_bf16: 40,"
                           " hbm_gbytes_s: 1000000}\n    nodes: 1\n    devices_per_node: 2\n"
                           f"    intra_node: {{bandwidth_gbps: {gbps}, latency_us: 0}}\n")
        out = os.path.join(work, "tp_" + wire)
        p = subprocess.run([hetc, "plan", model, y, "-o", out, "--seq", str(SEQ), "--microbatch",
                            "1", "--global-batch", "1", "--max-stages", "1", "--precision",
                            "bf16-mixed", "--tp-reduce-dtype", "bf16" if wire == "bf16" else "fp32"],
                           capture_output=True, text=True, timeout=600)
        if not check(p.returncode == 0, f"tp plan, {wire}: exit {p.returncode}: {p.stderr[-300:]}"):
            continue
        j = json.load(open(os.path.join(out, "plan.json")))
        st = j["stages"]
        if check(len(st) == 1 and st[0]["tp"] == 2, f"tp plan {wire}: stages {[(s['dp'], s['tp']) for s in st]}"):
            tpt[wire] = (st[0]["t_f"], st[0]["t_b"])
        check(j.get("tp_reduce_dtype") == ("bf16" if wire == "bf16" else None),
              f"tp plan {wire}: plan.json tp_reduce_dtype {j.get('tp_reduce_dtype')}")
    if check(len(tpt) == 3, f"tp plans {sorted(tpt)}"):
        for k, name in ((0, "t_f"), (1, "t_b")):
            c32, c16 = tpt["fp32"][k] - tpt["fast"][k], tpt["bf16"][k] - tpt["fast"][k]
            check(c32 > 0 and abs(c32 / c16 - 2) <= 1e-3,
                  f"TP 2 {name}: all-reduce time fp32 wire {c32:.6g} s, bf16 wire {c16:.6g} s "
                  f"(want half)")
        print(f"TP 2 all-reduce time per microbatch: fp32 wire {(tpt['fp32'][0] - tpt['fast'][0]) * 1e6:.3f}"
              f" us (forward), bf16 wire {(tpt['bf16'][0] - tpt['fast'][0]) * 1e6:.3f} us", flush=True)
    p = subprocess.run([hetc, "plan", model, dpy, "-o", os.path.join(work, "dp_refused"), "--seq",
                        str(SEQ), "--microbatch", str(ROWS), "--precision", "fp32",
                        "--grad-reduce-dtype", "bf16"],
                       capture_output=True, text=True, timeout=600)
    check(p.returncode != 0 and "--grad-reduce-dtype bf16 needs --precision bf16-mixed" in p.stderr,
          f"--grad-reduce-dtype bf16 without bf16-mixed: exit {p.returncode}: {p.stderr[-300:]}")
sys.exit(1 if failures else 0)
