"""The hetc command line: help, version, pass list, and clear errors with
non-zero exits on bad usage.  usage: test_cli.py HETC SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

HETC, SRC = sys.argv[1], sys.argv[2]
failures = []


def run(*args, cwd=None):
    p = subprocess.run([HETC, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
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

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
