#!/usr/bin/env python3
"""Stage-binary benchmarks (issue 6).  Prints figures; asserts nothing about time.

    python3 bench/compile/run.py [--hetc build/hetc] [--work /tmp/hetc_bench_compile]
                                 [--only a,b] [--steps 12] [--precision fp32]

(a) compile time: `hetc MODEL CLUSTER -o DIR` from start to linked stage
    binaries, for a GPT-2-124M-shaped model (12 blocks, hidden 768, 12 heads,
    vocab 50257, seq 1024; tools/gen_model.py, sparse weights) on
    examples/clusters/tiny_hetero.yaml; wall time of the whole command and the
    phases hetc prints (goal: <= 5 s).
(b) host step throughput of the pipelined run (launch.sh: the stage binaries
    under one mpirun, a virtual cluster on this machine) vs the single-process
    reference (hetc train) on the same model, data and microbatching: median
    tok/s over the steps after the first two, and the ratio.  Both use the
    same host kernels; on a 2-core box the 4 ranks are oversubscribed, so the
    ratio measures the pipeline's overheads (transfers, bubbles, polling), not
    a speed-up.
Both run --precision fp32 unless told otherwise (the figures docs/PERF.md
records were measured so; hetc's own default is bf16-mixed).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tok_s(text):
    v = [float(m.group(1)) for m in re.finditer(r"\| (\d+) tok/s", text)]
    return statistics.median(v[2:]) if len(v) > 2 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hetc", default=os.path.join(SRC, "build", "hetc"))
    ap.add_argument("--work", default="/tmp/hetc_bench_compile")
    ap.add_argument("--only", default="a,b")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed"),
                    help="hetc's --precision for every compile and hetc train (default fp32)")
    a = ap.parse_args()
    prec = ["--precision", a.precision]
    only = a.only.split(",")
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(f"machine: {os.cpu_count()} CPUs; hetc {a.hetc}; precision {a.precision}")
    cluster = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")
    if "a" in only:
        model = os.path.join(a.work, "gpt2_124m", "model.onnx")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(SRC, "tools", "gen_model.py"), "--family",
                            "gpt", "--layers", "12", "--hidden", "768", "--heads", "12", "--vocab",
                            "50257", "--seq", "1024", "-o", model], check=True, capture_output=True)
        out = os.path.join(a.work, "out_a")
        t0 = time.time()
        p = subprocess.run([a.hetc, model, cluster, "--seq", "1024", "--microbatch", "4",
                            "--global-batch", "16", "--threads", "2", *prec, "-o", out],
                           capture_output=True, text=True)
        wall = time.time() - t0
        if p.returncode:
            print(p.stderr[-2000:])
            sys.exit(1)
        m = re.search(r"^compile: wrote .* in ([\d.]+) s \(plan ([\d.]+) s\)", p.stderr, re.M)
        st = re.search(r"^compile: (\d+) stages", p.stderr, re.M)
        print(f"(a) GPT-2-124M shape, seq 1024, microbatch 4 x 4 on tiny_hetero.yaml: "
              f"{st.group(1) if st else '?'} stages, hetc wall {wall:.2f} s "
              f"(plan {m.group(2) if m else '?'} s, everything {m.group(1) if m else '?'} s)")
        tm = re.search(r"^compile: graphs ([\d.]+) s, initial parameters ([\d.]+) s, "
                       r"lower\+emit\+link ([\d.]+) s", p.stderr, re.M)
        if tm:
            print(f"    stage graphs {tm.group(1)} s, initial-parameter checkpoint {tm.group(2)} s, "
                  f"lowering + LLVM emission + link {tm.group(3)} s")
    if "b" in only:
        model = os.path.join(SRC, "examples", "gpt_tiny.onnx")
        data = os.path.join(SRC, "examples", "tiny_corpus.bin")
        out = os.path.join(a.work, "out_b")
        common = ["--seq", "64", "--microbatch", "4", *prec]
        subprocess.run([a.hetc, model, cluster, *common, "--global-batch", "16", "--threads", "2",
                        "-o", out], check=True, capture_output=True)
        rows = []
        for rnd in range(2):  # alternate, so a noisy neighbour hits both
            t = subprocess.run([a.hetc, "train", model, "--data", data, "--steps", str(a.steps),
                                *common, "--accum", "4", "--no-checkpoint"], capture_output=True,
                               text=True, env=env)
            l = subprocess.run([os.path.join(out, "launch.sh"), "--data", data, "--steps",
                                str(a.steps), "--checkpoint-dir", os.path.join(out, "ck")],
                               capture_output=True, text=True, env=env)
            if t.returncode or l.returncode:
                print(t.stderr[-1000:], l.stderr[-2000:])
                sys.exit(1)
            rows.append((tok_s(t.stdout), tok_s(l.stdout)))
        ref = statistics.median(r[0] for r in rows)
        pipe = statistics.median(r[1] for r in rows)
        print(f"(b) gpt_tiny, 4 microbatches of 4 x 64 tokens per step, {a.steps} steps: "
              f"hetc train {ref:.0f} tok/s, pipelined (3 stages, 4 ranks on {os.cpu_count()} "
              f"cores) {pipe:.0f} tok/s, ratio {pipe / ref:.2f}")


if __name__ == "__main__":
    main()
