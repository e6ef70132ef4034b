#!/usr/bin/env python3
"""Plan models on clusters with every planner and compare (issue 8).

    python3 bench/compare/run.py --hetc build/hetc [--models M,..] [--planners P,..] [--timeout 600]

Generates the models with tools/gen_model.py (sparse weights: nothing is
read), runs `hetc plan MODEL CLUSTER --planner=P` for hapt and the seed
planners, and rewrites the results section of docs/COMPARISON.md (between
the results markers) plus one SVG chart per model in docs/comparison/.
Figures: simulated iteration time (hetc's simulator, the same for every
planner), throughput relative to `uniform`, peak memory per stage (as a
share of the device), planning wall time and search steps.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = {
    # name: (gen_model args, seq, global batch)
    "GPT-2 1.5B": (["--family", "gpt", "--layers", "48", "--hidden", "1600", "--heads", "25",
                    "--vocab", "50257", "--seq", "1024"], 1024, 128),
    "GPT-39B": (["--family", "gpt", "--layers", "48", "--hidden", "8192", "--heads", "64",
                 "--vocab", "51200", "--seq", "1024"], 1024, 128),
    "LLaMA-70B": (["--family", "llama", "--layers", "80", "--hidden", "8192", "--heads", "64",
                   "--kv-heads", "8", "--vocab", "32000", "--seq", "4096"], 4096, 128),
}
CLUSTERS = {
    "case study (004)": "examples/clusters/case_study.yaml",
    "Table 2 (004)": "examples/clusters/hapt_table2.yaml",
    "AutoHet (001)": "bench/compare/clusters/autohet.yaml",
    "H2 exp-B (002)": "examples/clusters/h2_100b.yaml",
    "Zorse B (000)": "bench/compare/clusters/zorse_b.yaml",
}
PLANNERS = ["uniform", "hapt", "coarse", "coarse-blocks", "heteroauto", "metis", "metis-mem", "zorse",
            "autohet"]

ALT_RE = re.compile(r"^(\S+): (\d+) stages, (\d+) microbatches x ([\d.]+) samples, [^;]*; simulated "
                    r"([\d.e+-]+) s, Eq.13 ([\d.e+-]+) s, own cost ([\d.e+-]+|inf) s; peak memory (\d+)% "
                    r"of a device; (\d+) steps, ([\d.e+-]+) s; (.*)$")


def hapt_needs(outdir):
    """What a hapt plan.json needs beyond today's stage binaries (docs/STAGES.md)."""
    with open(os.path.join(outdir, "plan.json")) as f:
        d = json.load(f)
    # TP, ZeRO and recompute compile since issue 9 (TP where a stage holds a pattern);
    # HAPT's plans record none of issue 18's forms (parts, group, pipe, offload)
    need = []
    for st in d["stages"]:
        if len(st.get("parts", [])) > 1 or st.get("group") or st.get("pipe") or st.get("offload"):
            need.append("issue 18 forms")
            break
    # the binaries split a microbatch's rows over a stage's DP ranks, unevenly
    # where dp does not divide them (issue 18); a dp above them leaves a rank
    # without a row (hetc plan no longer chooses one)
    rows = d.get("global_batch", 0) // max(d["microbatches"], 1)
    if rows and any(st["dp"] > rows for st in d["stages"]):
        need.append("a DP rank without a row (dp above the microbatch rows)")
    return need


def run_one(hetc, model, seq, gbs, cluster, planner, outdir, timeout):
    # the seed papers' clusters plan in the dtype their files state (fp16 / bf16
    # mixed precision): hetc plan --precision cluster-dtype, a what-if
    cmd = [hetc, "plan", model, cluster, "--seq", str(seq), "--microbatch", "1",
           "--global-batch", str(gbs), "--precision", "cluster-dtype", "-o", outdir]
    if planner != "hapt":
        cmd.append("--planner=" + planner)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout (%d s)" % timeout}
    wall = time.time() - t0
    r = {"wall": wall}
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        msg = [l for l in lines if "no feasible plan" in l] or [l for l in lines if "hetc plan:" in l]
        r["status"] = (msg[-1] if msg else lines[-1] if lines else "failed")[:300]
        return r
    if planner == "hapt":
        m = re.search(r"simulated iteration ([\d.]+) s \((\d+) stages", p.stderr)
        s = re.search(r"search: .*?(\d+) full DPs.*?; ([\d.]+) s \(\+ ([\d.]+) s tabulating", p.stderr)
        r.update(status="ok", sim=float(m.group(1)), stages=int(m.group(2)),
                 steps=int(s.group(1)) if s else 0,
                 plan_s=(float(s.group(2)) + float(s.group(3))) if s else wall, runnable=True)
        with open(os.path.join(outdir, "plan.json")) as f:
            d = json.load(f)
        r["peak"] = max(st["mem_pred_bytes"] / st["mem_capacity_bytes"] for st in d["stages"])
        r["outdir"] = outdir
        need = hapt_needs(outdir)
        r["runnable"] = not need
        r["needs"] = "needs runtime work: " + "; ".join(need) if need else ""
        r["tp"] = [st.get("tp", 1) for st in d["stages"]]
        r["mem"] = [round(st["mem_pred_bytes"] / 2**30, 1) for st in d["stages"]]
        return r
    for line in p.stdout.splitlines():
        m = ALT_RE.match(line)
        if m:
            r.update(status="ok", stages=int(m.group(2)), sim=float(m.group(5)),
                     peak=int(m.group(8)) / 100, steps=int(m.group(9)), plan_s=float(m.group(10)),
                     runnable=m.group(11).startswith("stage binaries"), needs=m.group(11))
            # ministages sharing devices (plan.json "group") run as co-located
            # processes, each device holding all its group's arenas
            try:
                with open(os.path.join(outdir, "plan.json")) as f:
                    r["grouped"] = any(st.get("group") for st in json.load(f)["stages"])
            except (OSError, ValueError, KeyError):
                pass
            mem = re.findall(r"memory ([\d.]+) / ([\d.]+) GiB", p.stdout)
            r["mem"] = [float(a) for a, _ in mem]
            return r
    r["status"] = "unparsed output"
    return r


def svg_chart(model, results, path):
    """Grouped bars: throughput relative to uniform, per cluster and planner."""
    clusters = list(CLUSTERS)
    colors = ["#888888", "#d62728", "#ff9896", "#e377c2", "#1f77b4", "#2ca02c", "#98df8a", "#9467bd",
              "#8c564b"]
    W, H, left, top, bottom = 900, 360, 50, 30, 60
    gw = (W - left - 10) / len(clusters)
    bw = gw * 0.8 / len(PLANNERS)
    vals = []
    for c in clusters:
        base = results.get((model, c, "uniform"), {})
        for p in PLANNERS:
            r = results.get((model, c, p), {})
            if r.get("status") == "ok" and base.get("status") == "ok":
                vals.append(base["sim"] / r["sim"])
    vmax = max(vals + [1.0]) * 1.1
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (W, H),
           '<text x="%d" y="18" font-size="13">%s: throughput relative to uniform (simulated; '
           'missing bar = no feasible plan or no uniform baseline)</text>' % (left, model)]
    y0 = H - bottom
    for t in range(0, int(vmax) + 1):
        y = y0 - (y0 - top) * t / vmax
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, W - 10, y, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%dx</text>' % (left - 4, y + 4, t))
    for i, c in enumerate(clusters):
        x0 = left + i * gw + gw * 0.1
        base = results.get((model, c, "uniform"), {})
        for j, p in enumerate(PLANNERS):
            r = results.get((model, c, p), {})
            if r.get("status") != "ok" or base.get("status") != "ok":
                continue
            v = base["sim"] / r["sim"]
            h = (y0 - top) * v / vmax
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: '
                       '%.2fx</title></rect>' % (x0 + j * bw, y0 - h, bw * 0.9, h, colors[j], p, c, v))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (left + i * gw + gw / 2,
                                                                           y0 + 14, c))
    for j, p in enumerate(PLANNERS):
        x = left + j * 95
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                   % (x, H - 22, colors[j], x + 14, H - 13, p))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def fmt_table(model, results):
    lines = ["| cluster | planner | iteration (s) | vs uniform | stages | peak mem / device | "
             "memory per stage (GiB) | planning (s) | steps | stage binaries |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in CLUSTERS:
        base = results.get((model, c, "uniform"), {})
        for p in PLANNERS:
            r = results.get((model, c, p))
            if r is None:
                continue
            if r.get("status") != "ok":
                lines.append("| %s | %s | %s | | | | | | | |" % (c, p, r.get("status", "?").replace("|", "/")))
                continue
            ratio = "%.2fx" % (base["sim"] / r["sim"]) if base.get("status") == "ok" else "n/a"
            mem = r.get("mem", [])
            memtxt = ", ".join("%g" % m for m in mem[:8]) + (", ..." if len(mem) > 8 else "")
            run = "yes" if r.get("runnable") else "no: " + r.get("needs", "").replace("needs runtime work: ", "")
            if r.get("runnable") and r.get("grouped"):
                run += " (ministages co-located)"
            lines.append("| %s | %s | %.4f | %s | %d | %.0f%% | %s | %.2f | %d | %s |" % (
                c, p, r["sim"], ratio, r["stages"], 100 * r["peak"], memtxt, r["plan_s"], r["steps"], run))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetc", default=os.path.join(ROOT, "build", "hetc"))
    ap.add_argument("--work", default="/tmp/hetc_compare")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "COMPARISON.md"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    results = {}
    jpath = os.path.join(a.work, "results.json")
    if os.path.exists(jpath):
        with open(jpath) as f:
            for k, v in json.load(f).items():
                results[tuple(k.split("\t"))] = v
    for mname in a.models.split(","):
        gen, seq, gbs = MODELS[mname]
        mdir = os.path.join(a.work, re.sub(r"[^A-Za-z0-9.]+", "_", mname))
        model = os.path.join(mdir, "model.onnx")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_model.py")] + gen +
                           ["-o", model], check=True, capture_output=True)
        for cname, cpath in CLUSTERS.items():
            for p in a.planners.split(","):
                key = (mname, cname, p)
                if key in results and results[key].get("status") == "ok":
                    continue
                out = os.path.join(mdir, "plans", re.sub(r"[^A-Za-z0-9]+", "_", cname), p)
                r = run_one(a.hetc, model, seq, gbs, os.path.join(ROOT, cpath), p, out, a.timeout)
                results[key] = r
                print("%-10s %-18s %-10s %s" % (mname, cname, p, r.get("status") if r.get("status") != "ok"
                      else "%.4f s, %d steps, %.2f s planning" % (r["sim"], r["steps"], r["plan_s"])),
                      flush=True)
                with open(jpath, "w") as f:
                    json.dump({"\t".join(k): v for k, v in results.items()}, f, indent=1)
    # hapt results of earlier runs: what their plan.json needs
    for k, r in results.items():
        if k[2] == "hapt" and r.get("status") == "ok":
            out = os.path.join(a.work, re.sub(r"[^A-Za-z0-9.]+", "_", k[0]), "plans",
                               re.sub(r"[^A-Za-z0-9]+", "_", k[1]), "hapt")
            if os.path.exists(os.path.join(out, "plan.json")):
                need = hapt_needs(out)
                r["runnable"] = not need
                r["needs"] = "needs runtime work: " + "; ".join(need) if need else ""
    # write the results section and the charts
    figdir = os.path.join(os.path.dirname(a.doc), "comparison")
    os.makedirs(figdir, exist_ok=True)
    parts = []
    for mname in MODELS:
        if not any(k[0] == mname for k in results):
            continue
        _, seq, gbs = MODELS[mname]
        svg = re.sub(r"[^A-Za-z0-9]+", "_", mname).strip("_") + ".svg"
        svg_chart(mname, results, os.path.join(figdir, svg))
        parts.append("### %s (seq %d, global batch %d, microbatch 1)\n\n![%s](comparison/%s)\n\n%s\n"
                     % (mname, seq, gbs, mname, svg, fmt_table(mname, results)))
    with open(a.doc) as f:
        doc = f.read()
    b, e = "<!-- results:begin -->", "<!-- results:end -->"
    if b in doc and e in doc:
        doc = doc[:doc.index(b) + len(b)] + "\n" + "\n".join(parts) + doc[doc.index(e):]
        with open(a.doc, "w") as f:
            f.write(doc)
    print("wrote", a.doc, figdir)


if __name__ == "__main__":
    main()
