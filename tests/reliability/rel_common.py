"""Shared helpers for the reliability tests (issue 16): run a command with a
timeout, flag crashes and sanitizer reports, collect failures.  Every hetc
train / plan / compile they run is --precision fp32 unless it names one
(tests/hetc_cmd.py: what these tests were written and compared for; hetc's
default is bf16-mixed)."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402
from sanenv import compiler_env  # noqa: E402

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL:", msg, flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def run(args, timeout=120, env=None, pin="fp32", **kw):
    """Run args; returns CompletedProcess (rc -9 and 'TIMEOUT' in stderr on a
    timeout, so a hang fails the test instead of blocking it).  A signal or a
    sanitizer report is a failure by itself.  A hetc command runs at
    --precision `pin` unless it names one (hetc_cmd.pinned)."""
    hetc = os.path.basename(str(args[0])) == "hetc"
    if hetc:
        args = pinned([str(a) for a in args], pin)
    e = compiler_env() if hetc else dict(os.environ)
    e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":exitcode=86"
    e["UBSAN_OPTIONS"] = e.get("UBSAN_OPTIONS", "") + ":halt_on_error=1:exitcode=87"
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    if env:
        e.update(env)
    try:
        p = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                           errors="replace", env=e, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as t:
        p = subprocess.CompletedProcess(t.cmd, -9, "", "TIMEOUT after %ss" % timeout)
    bad = ("Sanitizer" in p.stderr or "runtime error:" in p.stderr or p.returncode < 0
           or p.returncode in (86, 87))
    if bad:
        fail("%s: crashed, hung or sanitizer report (rc=%d)\n%s" %
             (" ".join(str(a) for a in args), p.returncode, p.stderr[-3000:]))
    return p


def workdir():
    d = tempfile.mkdtemp(prefix="hetc_rel_")
    atexit.register(shutil.rmtree, d, True)
    return d


def finish():
    if FAILS:
        print("%d failure(s)" % len(FAILS))
        sys.exit(1)
    print("all passed")


def compile_tiny(hetc, src, out, steps=4, extra=(), timeout=600, cluster="tiny_hetero.yaml"):
    """hetc compile of examples/gpt_tiny.onnx (seq 16, microbatch 2, global
    batch 4, cosine schedule with lr 1e-3 and 1 warm-up step over `steps`)
    into out; returns the CompletedProcess."""
    return run([hetc, os.path.join(src, "examples", "gpt_tiny.onnx"),
                os.path.join(src, "examples", "clusters", cluster), "--seq", "16",
                "--microbatch", "2", "--global-batch", "4", "--threads", "2", "--steps",
                str(steps), "--lr", "1e-3", "--warmup", "1", "--lr-schedule", "cosine",
                *extra, "-o", out], timeout=timeout)


def launch(out, src, steps, *extra, timeout=300, env=None):
    """out/launch.sh on examples/tiny_corpus.bin for steps steps."""
    e = {"HETRT_TIMEOUT_S": "60"}
    e.update(env or {})
    return run([os.path.join(out, "launch.sh"), "--data",
                os.path.join(src, "examples", "tiny_corpus.bin"), "--steps", str(steps),
                *extra], timeout=timeout, env=e)
