#!/usr/bin/env python3
"""bench/gpu: where a --backend=cuda stage binary's GPU time goes.

    python3 bench/gpu/kernel_profile.py --build DIR --data TOKENS.bin [--steps 2] [--out DIR]

Runs DIR/launch.sh twice: once plain (the step times the stage binary
prints: wall time per step), once under Nsight Compute (`ncu`, one metric:
gpu__time_duration.sum, clocks left alone) for the same steps.  Prints the
kernels grouped by family (cuBLASLt GEMMs, each hkc_* kernel, copies) with
calls and milliseconds per step, and the step's GPU-busy share: wall time
minus the kernels' sum is launch overhead, host work (host fallbacks, the
data loader, MPI) and synchronisation.  Needs ncu (the lent GPU machine
has it); run by bench/gpu/run.sh --profile.
"""
import argparse
import collections
import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile

STEP_RE = re.compile(r"(?m)^step\s+(\d+)/(\d+) \| loss \S+ \| grad norm \S+ \| lr \S+ \| (\S+) tok/s")
UNIT = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
        "s": 1e3, "second": 1e3}


def find_ncu():
    p = shutil.which("ncu")
    if p:
        return p
    hits = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") +
                  glob.glob("/usr/local/cuda*/bin/ncu") +
                  glob.glob("/usr/local/cuda*/nsight-compute*/ncu"))
    return hits[-1] if hits else None


def family(name):
    """A readable group for one kernel name"""
    n = name.split("(")[0].strip()
    if re.search(r"gemm|xmma|cutlass|sm\d+_.*(tensorop|sgemm|h?gemm)|splitK|Kernel2", n, re.I):
        return "GEMM (cuBLASLt)"
    n = re.sub(r"^void\s+", "", n)
    n = re.sub(r"<.*", "", n)
    return n


def steps_of(text):
    return [(int(m.group(1)), float(m.group(3))) for m in STEP_RE.finditer(text)]


def run(cmd, env=None, timeout=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="a --backend=cuda build (has launch.sh)")
    ap.add_argument("--data", help="llm.c token file")
    ap.add_argument("--from-csv", metavar="NCU_CSV",
                    help="no runs: group an earlier run's ncu.csv (give --wall-ms for the busy share)")
    ap.add_argument("--wall-ms", type=float, default=0, help="with --from-csv: step wall time")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tokens-per-step", type=int, default=8192, help="B x T of the build")
    ap.add_argument("--out", default=".", help="where ncu.csv goes")
    ap.add_argument("--timeout", type=int, default=240, help="seconds for the ncu run")
    ap.add_argument("--launch-count", type=int, default=0,
                    help="profile only the first N kernel launches (ncu's per-kernel cost is high)")
    a = ap.parse_args()
    if a.from_csv:
        return report(a, a.from_csv, a.wall_ms)
    if not (a.build and a.data):
        ap.error("--build and --data are needed (or --from-csv)")
    ncu = find_ncu()
    if not ncu:
        sys.exit("profile: no ncu (Nsight Compute) on this machine")
    launch = os.path.join(a.build, "launch.sh")
    with tempfile.TemporaryDirectory(prefix="hetc_prof_") as work:
        # plain: wall time per step (the first step is warm-up)
        rc, t = run([launch, "--data", a.data, "--steps", str(a.steps + 1),
                     "--checkpoint-dir", os.path.join(work, "c0")])
        st = [(k, tps) for k, tps in steps_of(t)]
        if rc or len(st) != a.steps + 1:
            sys.exit(f"profile: plain run failed (exit {rc})\n{t[-3000:]}")
        wall_ms = sum(a.tokens_per_step / tps for _, tps in st[1:]) / a.steps * 1e3
        # under ncu: one metric, every process of the job (mpirun's children)
        csv_path = os.path.join(a.out, "ncu.csv")
        cmd = [ncu, "--target-processes", "all", "--clock-control", "none", "--cache-control", "none",
               *(["--launch-count", str(a.launch_count)] if a.launch_count else []),
               "--metrics", "gpu__time_duration.sum", "--csv", "--log-file", csv_path,
               launch, "--data", a.data, "--steps", str(a.steps + 1),
               "--checkpoint-dir", os.path.join(work, "c1")]
        try:
            rc, t = run(cmd, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            sys.exit(f"profile: ncu run passed {a.timeout} s")
        if rc:
            sys.exit(f"profile: ncu run failed (exit {rc})\n{t[-3000:]}")
    return report(a, csv_path, wall_ms)


def report(a, csv_path, wall_ms):
    text = open(csv_path).read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"profile: no kernel rows in {csv_path}")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    by_id = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ms = float(r["Metric Value"].replace(",", "")) * UNIT.get(r["Metric Unit"], 1.0)
        by_id[(r["Process ID"], r["ID"])] = (r["Kernel Name"], ms)
    # the first step's kernels: as many launches as a step has; keep the
    # last a.steps steps' share by dropping the first 1/(steps+1) of launches
    ks = [by_id[k] for k in sorted(by_id, key=lambda k: (k[0], int(k[1])))]
    per_step = len(ks) // (a.steps + 1)
    timed = ks[len(ks) - per_step * a.steps:]
    if a.launch_count and len(ks) >= a.launch_count:  # a prefix of step 1: shares only
        per_step, timed, a.steps = len(ks), ks, 1
    fam = collections.defaultdict(lambda: [0, 0.0])
    for name, ms in timed:
        f = fam[family(name)]
        f[0] += 1
        f[1] += ms
    busy = sum(ms for _, ms in timed) / a.steps
    if a.launch_count and len(ks) >= a.launch_count:
        print(f"kernels: the first {len(ks)} launches of step 1, {busy:.1f} ms of GPU time; "
              f"step wall time {wall_ms:.1f} ms (plain run)")
    else:
        print(f"kernels: {len(ks)} launches in {a.steps + 1} steps ({per_step} a step); "
              f"step wall time {wall_ms:.1f} ms (plain run), GPU busy {busy:.1f} ms "
              f"({100 * busy / max(wall_ms, 1e-9):.0f} %), the rest {wall_ms - busy:.1f} ms "
              f"(launch gaps, host work, syncs)")
    print()
    print("| kernel family | launches / step | ms / step | % of GPU busy |")
    print("| --- | ---: | ---: | ---: |")
    for name, (n, ms) in sorted(fam.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n / a.steps:.0f} | {ms / a.steps:.2f} | {100 * ms / a.steps / busy:.1f} |")


if __name__ == "__main__":
    main()
