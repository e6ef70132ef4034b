"""Hugging Face exports through hetc, against PyTorch (issue 14).

For every export of a family in tests/hf (tools/export_hf.py wrote them:
TorchScript, dynamo and optimum exporters, fresh and randomised weights, the
static LLaMA and optimum's input signature through TorchScript), each step
only when the one before passed:

  import   `hetc import --batch 2 --seq 16` exits 0
  run      `hetc run` logits vs torch's (ref.npz `logits`): max |diff| /
           max |torch| <= 1e-4
  params   hetc's trainable tensors == torch's named_parameters (ties once):
           the same count, and each torch parameter matched by value to one
           hetc tensor (2-D ones possibly transposed) -- `hetc import
           --list-params`, matched as test_param_set.py matches
  train    `hetc train`, 5 AdamW steps with the reference's hyper-parameters:
           loss and pre-clip grad norm of every step vs torch's <= 1e-4
  launch   (--launch) compiled onto examples/clusters/tiny_hetero.yaml,
           launch.sh's losses vs `hetc train` on the same microbatching
           <= 1e-5

    test_hf.py HETC WORKDIR FAMILY [FAMILY...] [--launch] [--markdown FILE]

--markdown writes the family x exporter table of docs/MODELS.md from what
this run measured.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

import test_param_set as param_set  # the parameter-set oracle (tests/hf)

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests"))
from sanenv import compiler_env  # noqa: E402
HF = os.path.join(SRC, "tests", "hf")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTER = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")
RTOL, LAUNCH_RTOL = 1e-4, 1e-5
STEPS = 5
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           HETRT_TIMEOUT_S=os.environ.get("HETRT_TIMEOUT_S", "120"))
STEP_RE = re.compile(r"step\s+(\d+)/\d+ \| loss ([0-9.eE+-]+|nan|inf) \| grad norm "
                     r"([0-9.eE+-]+|nan|inf)")


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def run(cmd, timeout=600):
    env = compiler_env(ENV) if os.path.basename(cmd[0]) == "hetc" else ENV
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return p


def first_error(p):
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower() or "not supported" in l or "hetc" in l.split(":")[0]:
            return l.strip()[:300]
    return (lines[-1].strip() if lines else "exit %d" % p.returncode)[:300]


def mask_inputs(onnx_path, x, work):
    """The extra inputs of optimum's signature, bound as a packed-token run
    binds them: attention_mask all ones, position_ids arange."""
    import onnx
    names = [i.name for i in onnx.load(onnx_path, load_external_data=False).graph.input]
    args = []
    for n in names:
        if n == "input_ids":
            a = x
        elif n == "attention_mask":
            a = np.ones_like(x)
        elif n == "position_ids":
            a = np.broadcast_to(np.arange(x.shape[1], dtype=np.int64), x.shape).copy()
        else:
            continue
        path = os.path.join(work, n + ".npy")
        np.save(path, a)
        args += ["--input", "%s=%s" % (n, path)]
    return args


def train_cmd(hetc, path, hp, accum=1, extra=()):
    return [hetc, "train", path, "--data", DATA, "--steps", str(hp["steps"]),
            "--microbatch", str(hp["batch"] // accum), "--accum", str(accum),
            "--seq", str(hp["seq"]), "--optimizer", "adamw", "--lr", repr(hp["lr"]),
            "--beta1", repr(hp["betas"][0]), "--beta2", repr(hp["betas"][1]),
            "--adam-eps", repr(hp["eps"]), "--weight-decay", repr(hp["weight_decay"]),
            "--clip", repr(hp["clip"]), "--lr-schedule", hp["lr_schedule"],
            "--no-checkpoint", *extra]


def steps_of(text):
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
            for m in STEP_RE.finditer(text)}


def check_export(hetc, work, name, ref, hp, launch):
    """One export: a dict of step -> 'ok' / error, and figures."""
    path = os.path.join(HF, name)
    res = {"export": name}
    w = os.path.join(work, name[:-5])
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    p = run([hetc, "import", path, "--batch", "2", "--seq", "16", "-o", os.path.join(w, "imp")])
    if p.returncode:
        res["import"] = first_error(p)
        return res
    res["import"] = "ok"
    x = ref["input_ids"].astype(np.int64)
    ins = mask_inputs(path, x, w)
    p = run([hetc, "run", path, *ins, "--output-dir", os.path.join(w, "run")])
    if p.returncode:
        res["run"] = first_error(p)
        return res
    e = rel(np.load(os.path.join(w, "run", "logits.npy")), ref["logits"])
    res["run_err"] = e
    res["run"] = "ok" if e <= RTOL else "logits off by %.2e" % e
    if e > RTOL:
        return res
    mine, err = param_set.listed(hetc, path, os.path.join(w, "params"))
    torch_p = {k[6:]: ref[k] for k in ref.files if k.startswith("param/")}
    res["params"] = err or param_set.match(mine, torch_p, hp["family"], name) or "ok"
    if res["params"] == "ok" and len(mine) < len(torch_p):
        # what the exporter removed torch still trains: no trajectory to compare
        res["dropped"] = len(torch_p) - len(mine)
        return res
    p = run(train_cmd(hetc, path, hp))
    if p.returncode:
        res["train"] = first_error(p)
        return res
    got = steps_of(p.stdout)
    if sorted(got) != list(range(1, hp["steps"] + 1)):
        res["train"] = "step lines %s" % sorted(got)
        return res
    lo = max(abs(got[k + 1][0] - ref["traj_loss"][k]) / abs(ref["traj_loss"][k])
             for k in range(hp["steps"]))
    gn = max(abs(got[k + 1][1] - ref["traj_grad_norm"][k]) / abs(ref["traj_grad_norm"][k])
             for k in range(hp["steps"]))
    res["train_err"] = max(lo, gn)
    res["train"] = "ok" if max(lo, gn) <= RTOL else "loss off by %.2e, grad norm by %.2e" % (
        lo, gn)
    if not launch or res["train"] != "ok":
        return res
    out = os.path.join(w, "build")
    gb = 4
    p = run([hetc, path, CLUSTER, "--seq", str(hp["seq"]), "--microbatch", "2",
             "--global-batch", str(gb), "--threads", "2", "--steps", str(STEPS),
             "--lr", repr(hp["lr"]), "--beta1", repr(hp["betas"][0]),
             "--beta2", repr(hp["betas"][1]), "--adam-eps", repr(hp["eps"]),
             "--weight-decay", repr(hp["weight_decay"]), "--clip", repr(hp["clip"]),
             "--lr-schedule", hp["lr_schedule"], "-o", out])
    if p.returncode:
        res["launch"] = "compile: " + first_error(p)
        return res
    k = json.load(open(os.path.join(out, "plan.json")))["microbatches"]
    p_ref = run(train_cmd(hetc, path, dict(hp, batch=2 * k, steps=STEPS), accum=k))
    # a checkpoint directory of its own: a fresh run refuses a used one
    p = run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(STEPS),
             "--checkpoint-dir", os.path.join(w, "ckpt")])
    if p.returncode or p_ref.returncode:
        res["launch"] = first_error(p if p.returncode else p_ref)
        return res
    a = {s: v[0] for s, v in steps_of(p.stdout).items()}
    if not a:  # launch.sh prints `step N/M | loss X` without the norm
        a = {int(m.group(1)): float(m.group(2)) for m in
             re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", p.stdout, re.M)}
    b = {s: v[0] for s, v in steps_of(p_ref.stdout).items()}
    if sorted(a) != sorted(b) or not a:
        res["launch"] = "launch steps %s vs hetc train %s" % (sorted(a), sorted(b))
        return res
    e = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
    res["launch_err"] = e
    res["launch"] = "ok" if e <= LAUNCH_RTOL else "launch vs hetc train off by %.2e" % e
    return res


def exports_of(family):
    """Every tests/hf/<family>_<init>_<exporter>.onnx with its reference."""
    out = []
    for init in ("fresh", "random"):
        ref = np.load(os.path.join(HF, "%s_%s.ref.npz" % (family, init)))
        hp = json.loads(str(ref["hparams"]))
        stem = "%s_%s_" % (family, init)
        for path in sorted(glob.glob(os.path.join(HF, stem + "*.onnx"))):
            fname = os.path.basename(path)
            out.append((fname, fname[len(stem):-5], init, ref, hp))
    return out


STEPS_ORDER = ("import", "run", "params", "train", "launch")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hetc")
    ap.add_argument("work")
    ap.add_argument("families", nargs="+")
    ap.add_argument("--launch", action="store_true")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    fams = sorted({os.path.basename(f).split("_fresh.ref")[0]
                   for f in glob.glob(os.path.join(HF, "*_fresh.ref.npz"))}) \
        if a.families == ["all"] else a.families
    os.makedirs(a.work, exist_ok=True)
    results, fails = [], 0
    for fam in fams:
        for fname, ex, init, ref, hp in exports_of(fam):
            r = check_export(a.hetc, a.work, fname, ref, hp, a.launch)
            r.update(family=fam, exporter=ex, init=init)
            results.append(r)
            bad = [s for s in STEPS_ORDER if s in r and r[s] != "ok"]
            if "dropped" not in r:
                bad += [s for s in STEPS_ORDER[:4] if s not in r and not bad]
            fails += bool(bad)
            figs = " ".join("%s %.1e" % (k[:-4], r[k]) for k in ("run_err", "train_err",
                                                                  "launch_err") if k in r)
            if "dropped" in r:
                figs += " the exporter dropped %d constant parameters: not trained" % r["dropped"]
            print("%-34s %s%s" % (fname, "ok" if not bad else "FAIL " + "; ".join(
                "%s: %s" % (s, r.get(s, "not reached")) for s in bad[:1]),
                "  (" + figs + ")" if figs else ""), flush=True)
    if a.markdown:
        write_markdown(a.markdown, results)
    print("%d of %d exports pass every step" % (len(results) - fails, len(results)))
    sys.exit(1 if fails else 0)


def write_markdown(path, results):
    exps = ["torchscript", "dynamo", "optimum", "maskinputs", "static", "dynstatic"]
    fams = sorted({r["family"] for r in results})
    lines = ["| family | weights | " + " | ".join(exps) + " |",
             "| --- | --- | " + " | ".join("---" for _ in exps) + " |"]

    def cell(r):
        if r is None:
            return ""
        for s in STEPS_ORDER:
            if s in r and r[s] != "ok":
                return "%s fails" % s
        if "dropped" in r:
            return "import, run, params; exporter dropped %d zero/one tensors" % r["dropped"]
        done = [s for s in STEPS_ORDER if r.get(s) == "ok"]
        return "%s (run %.0e, train %s)" % (
            "all" if "launch" in done else "+".join(done), r.get("run_err", float("nan")),
            "%.0e" % r["train_err"] if "train_err" in r else "-")
    for f in fams:
        for init in ("fresh", "random"):
            row = {r["exporter"]: r for r in results if r["family"] == f and r["init"] == init}
            lines.append("| %s | %s | %s |" % (f, init, " | ".join(cell(row.get(e))
                                                                    for e in exps)))
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
