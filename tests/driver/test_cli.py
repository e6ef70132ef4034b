"""The hetc command line: help, version, pass list, and clear errors with
non-zero exits on bad usage.  usage: test_cli.py HETC SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402
from sanenv import compiler_env  # noqa: E402

HETC, SRC = sys.argv[1], sys.argv[2]
failures = []


def run(*args, cwd=None):
    """hetc args; train / plan / compile at --precision fp32 unless args name
    one (tests/hetc_cmd.py: the stage-vs-train check below is fp32's 1e-5)"""
    p = subprocess.run(pinned([HETC, *args]), capture_output=True, text=True, cwd=cwd, timeout=300,
                       env=compiler_env())
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


rc, out, err = run("--help")
check(rc == 0 and "usage: hetc" in out and "import" in out and "run" in out, "--help")
rc, out, err = run()
check(rc == 2 and "usage: hetc" in err, "no arguments: usage on stderr, exit 2")
rc, out, err = run("--version")
check(rc == 0 and out.startswith("hetc "), "--version")
rc, out, err = run("--list-passes")
for p in ("shape-infer", "const-fold", "dce", "canonicalize"):
    check(rc == 0 and p in out, f"--list-passes lists {p}")
rc, out, err = run("frobnicate")
check(rc == 2 and "unknown command 'frobnicate'" in err, "unknown command")
for sub in ("import", "run"):
    rc, out, err = run(sub, "--help")
    check(rc == 0 and f"usage: hetc {sub}" in out, f"{sub} --help")
    rc, out, err = run(sub, "--no-such-flag", "x.onnx")
    check(rc == 2 and "--no-such-flag" in err, f"{sub}: unknown option named")
    rc, out, err = run(sub, "/nonexistent/model.onnx")
    check(rc == 1 and "/nonexistent/model.onnx" in err, f"{sub}: missing model file named")

# --batch / --seq help: every dim name the importer binds (frontend/onnx_dims.c's lists)
import re
dims_src = open(os.path.join(SRC, "frontend", "onnx_dims.c")).read()
for which in ("batch", "seq"):
    names = re.findall(r'"([^"]+)"', re.search(which + r"_names\[\] = \{([^}]*)\}", dims_src).group(1))
    for sub in ("import", "train", "plan"):
        rc, out, err = run(sub, "--help")
        line = re.search(r"--%s N .*?\)" % which, out, re.S)
        got = re.findall(r"[\w]+", line.group(0).split("(dim_params", 1)[1]) if line else []
        check(rc == 0 and names and got == names,
              f"{sub} --help: --{which} lists the importer's names {names}: {got}")

# compile --help's --backend line: the rows of the backend table (driver/backends.c)
be_src = open(os.path.join(SRC, "driver", "backends.c")).read()
be_names = re.findall(r'\{"(\w+)", &lower_backend_', be_src)
rc, out, err = run("compile", "--help")
line = re.search(r"--backend NAME .*?: (.*?) \(default", out)
got = re.split(r", | or ", line.group(1)) if line else []
check(rc == 0 and len(be_names) >= 2 and got == be_names,
      f"compile --help: --backend lists the backend table's rows {be_names}: {got}")

rc, out, err = run("import", "m.onnx", "--batch", "abc")
check(rc == 2 and "--batch" in err and "abc" in err, "--batch with junk")
rc, out, err = run("import", "m.onnx", "--bind", "novalue")
check(rc == 2 and "NAME=VALUE" in err, "--bind without =")

model = os.path.join(SRC, "tests", "models", "gpt2_op17.onnx")
if os.path.exists(model):
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("import", model, "--passes=no-such-pass", "--batch", "2", "--seq", "16", "-o", d)
        check(rc == 1 and "no-such-pass" in err and "shape-infer" in err,
              "unknown pass: error lists the known passes")
        rc, out, err = run("import", model, "-o", d)
        check(rc == 1 and ("batch" in err or "seq" in err), "unbound symbolic dim is named")
        rc, out, err = run("import", model, "--batch", "2", "--seq", "16",
                           "--dump-ir-after=all", "-o", d)
        dumps = sorted(os.listdir(os.path.join(d, "ir"))) if rc == 0 else []
        check(rc == 0 and dumps and dumps[0] == "00-import.ir" and len(dumps) >= 5,
              f"--dump-ir-after=all writes one file per pass: {dumps}")
        with tempfile.TemporaryDirectory() as d2:
            rc, out, err = run("import", model, "--batch", "2", "--seq", "16",
                               "--dump-ir-after=canonicalize", "-o", d2)
            dumps = sorted(os.listdir(os.path.join(d2, "ir"))) if rc == 0 else []
            check(rc == 0 and len(dumps) == 1 and dumps[0].endswith("-canonicalize.ir"),
                  f"--dump-ir-after=canonicalize writes only that dump: {dumps}")
        rc, out, err = run("run", model, "--input", "nosuch=" + model.replace(".onnx", ".input_ids.npy"),
                           "--output-dir", d)
        check(rc == 1 and "nosuch" in err and "input_ids" in err, "run: unknown input name listed")

corpus = os.path.join(SRC, "examples", "tiny_corpus.bin")
if os.path.exists(model) and os.path.exists(corpus):
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("train", model, "--data", corpus, "--steps", "1", "--microbatch", "2",
                           "--seq", "16", "--dump-ir-after=all", "-o", d, "--no-checkpoint",
                           "--quiet")
        irdir = os.path.join(d, "ir")
        dumps = sorted(os.listdir(irdir)) if rc == 0 and os.path.isdir(irdir) else []
        check(rc == 0 and [f[3:] for f in dumps[-4:]] ==
              ["loss.ir", "autodiff.ir", "shape-infer.ir", "optimizer.ir"],
              f"train --dump-ir-after=all: loss, autodiff, optimizer dumps in order: {dumps}")
        text = {f: open(os.path.join(irdir, f)).read() for f in dumps}
        fwd_only = [f for f in dumps if "autodiff" not in f and "optimizer" not in f
                    and not f.startswith(("08", "09", "1"))]
        check(dumps and all("@bwd" not in text[f] and "@upd" not in text[f] for f in fwd_only)
              and any("@bwd" in text[f] for f in dumps if "autodiff" in f)
              and any("@upd" in text[f] for f in dumps if "optimizer" in f),
              "train dumps mark backward (@bwd) and update (@upd) nodes, forward dumps neither")

# one name per meaning in every command: --adam-eps (AdamW), --plan-eps (the planner's ε)
cluster = os.path.join(SRC, "examples", "clusters", "tiny_pair.yaml")
for sub, extra in (("train", ["--data", corpus, "--steps", "1"]), ("plan", [cluster]),
                   ("compile", [cluster])):
    for spelling in (["--eps", "0.2"], ["--eps=0.2"]):
        rc, out, err = run(sub, model, *extra, *spelling)
        check(rc == 2 and "--adam-eps" in err and "--plan-eps" in err,
              f"{sub} {spelling[0]}: rejected, naming both new names: {err.strip()}")
for sub in ("train", "plan", "compile"):
    rc, out, err = run(sub, "--help")
    check(rc == 0 and ("--adam-eps" in out or "--plan-eps" in out)
          and not re.search(r"^\s*--eps\b", out, re.M), f"{sub} --help: no bare --eps")
if os.path.exists(model):
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run("plan", model, cluster, "--batch", "2", "--seq", "16", "--threads", "2",
                           "--plan-eps", "0.25", "-o", d)
        import json
        ok = rc == 0 and json.load(open(os.path.join(d, "plan.json")))["eps"] == 0.25
        check(ok, f"plan --plan-eps 0.25 is plan.json's eps: {err[-300:]}")

# hetc plan --help says what plans are for now (no "later release")
rc, out, err = run("plan", "--help")
check(rc == 0 and "later release" not in out and "hetc compile" in out,
      "plan --help: points at hetc compile for the stage binaries")

# fixed-shape (static) exports: messages that say what to do, and compile at dp 1
if os.path.exists(model) and os.path.exists(corpus):
    import onnx
    with tempfile.TemporaryDirectory() as d:
        m = onnx.load(model)
        for v in list(m.graph.input) + list(m.graph.output):
            for dim, val in zip(v.type.tensor_type.shape.dim, (2, 16)):
                if dim.dim_param in ("batch", "seq"):
                    dim.Clear()
                    dim.dim_value = val
        static = os.path.join(d, "static.onnx")
        onnx.save(m, static)
        tr = ["--data", corpus, "--steps", "2", "--no-checkpoint"]
        rc, out, err = run("train", static, *tr, "--microbatch", "4", "--seq", "16")
        check(rc == 1 and "fixed batch of 2" in err and "--microbatch 2" in err
              and "export_hf.py" in err, f"train: a fixed batch says --microbatch 2: {err.strip()}")
        rc, out, err = run("train", static, *tr, "--microbatch", "2", "--seq", "64")
        check(rc == 1 and "fixed sequence length of 16" in err and "--seq 16" in err,
              f"train: a fixed sequence says --seq 16: {err.strip()}")
        rc, out, err = run("plan", static, cluster, "--microbatch", "1", "--seq", "16",
                           "--threads", "2", "-o", os.path.join(d, "p"))
        check(rc == 1 and "fixed batch of 2" in err and "--microbatch 2" in err
              and "--global-batch" in err, f"plan: a fixed batch says --microbatch 2: {err.strip()}")
        rc, out, err = run("profile", "--device-type", "A100-80GB", static, "--analytic",
                           "--seq", "16", "--microbatch", "1", "-o", os.path.join(d, "prof.json"))
        check(rc == 1 and "fixed batch of 2" in err and "--microbatch 2" in err,
              f"profile: a fixed batch says --microbatch 2: {err.strip()}")
        hetero = os.path.join(SRC, "examples", "clusters", "tiny_hetero.yaml")
        out_dir = os.path.join(d, "c")
        rc, out, err = run(static, hetero, "--microbatch", "2", "--global-batch", "4", "--seq",
                           "16", "--threads", "2", "--steps", "2", "-o", out_dir)
        import json
        plan = json.load(open(os.path.join(out_dir, "plan.json"))) if rc == 0 else {}
        check(rc == 0 and "fixed batch of 2" in err and plan["stages"]
              and all(st["dp"] == 1 for st in plan["stages"]),
              f"compile of a fixed-batch model plans dp 1 everywhere: {err[-500:]}")
        if rc == 0:
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1")
            p = subprocess.run([os.path.join(out_dir, "launch.sh"), "--data",
                                os.path.abspath(corpus), "--steps", "2"],
                               capture_output=True, text=True, cwd=d, env=env, timeout=300)
            rc2, tout, _ = run("train", static, *tr, "--microbatch", "2", "--accum", "2",
                               "--seq", "16")
            pat = r"^step\s+(\d+)/\d+ \| loss (\S+)"
            got = dict(re.findall(pat, p.stdout, re.M))
            want = dict(re.findall(pat, tout, re.M))
            e = max((abs(float(got.get(k, "nan")) - float(v)) / abs(float(v))
                     for k, v in want.items()), default=1.0)
            check(p.returncode == 0 and rc2 == 0 and len(want) == 2 and e <= 1e-5,
                  f"the fixed-batch stage binaries train as hetc train: {got} vs {want}: "
                  + p.stderr[-600:])
        # --plan with a stage at dp 2 (its own rows: 1 of the fixed 2)
        rc, out, err = run("plan", model, hetero, "--microbatch", "2", "--global-batch", "4",
                           "--seq", "16", "--threads", "2", "--dp-divides-microbatch", "-o",
                           os.path.join(d, "p2"))
        p2 = json.load(open(os.path.join(d, "p2", "plan.json"))) if rc == 0 else None
        if check(p2 is not None and any(st["dp"] > 1 for st in p2["stages"]),
                 "the symbolic model's plan has a stage at dp > 1 (the case to check)"):
                json.dump(p2, open(os.path.join(d, "dp2.json"), "w"))
                rc, out, err = run(static, hetero, "--seq", "16", "--plan",
                                   os.path.join(d, "dp2.json"), "-o", os.path.join(d, "c2"))
                check(rc != 0 and "fixed batch of 2" in err and "dp 1" in err
                      and "stage 0: stage 0" not in err and "export_hf.py" in err,
                      f"compile --plan with a dp-2 stage of a fixed-batch model: {err.strip()}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
