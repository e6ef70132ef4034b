"""Shared helpers of the stage tests (tests/stages/test_stages_*.py).

Every stage test is `python3 test_stages_NAME.py HETC WORKDIR`: it compiles
examples/gpt_tiny.onnx with `hetc compile` onto a cluster of
examples/clusters, runs the stage binaries through the build's launch.sh
(one MPMD mpirun) and compares the printed losses with `hetc train`, the
single-process trainer, on the same data order and microbatching.  This
module holds what they all do: the command lines, the loss parsing, the
relative comparison and the failure bookkeeping.  A test makes one
StageTest, checks with t.check(...) and ends with t.finish().

Precision: every hetc train / plan / compile a stage test runs through
StageTest.run is `--precision fp32` unless it names one (tests/hetc_cmd.py:
hetc defaults to bf16-mixed, these tests compare at fp32 tolerances); the
bf16-mixed tests name --precision bf16-mixed (in OPT or on the command).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hetc_cmd import pinned  # noqa: E402
from sanenv import compiler_env  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
DATA = os.path.join(SRC, "examples", "tiny_corpus.bin")
CLUSTERS = os.path.join(SRC, "examples", "clusters")
# the optimizer every stage test trains with (compile and hetc train alike)
OPT = ["--lr", "3e-3", "--warmup", "3", "--lr-schedule", "cosine"]


def losses(text, as_text=False):
    """step -> loss from `step N/M | loss X` lines; as_text keeps the printed
    digits (for comparing two stage runs exactly)."""
    return {int(m.group(1)): (m.group(2) if as_text else float(m.group(2))) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| loss (\S+)", text, re.M)}


def step_lines(text):
    """step -> "loss X | grad norm Y", the printed digits (a resumed run
    must print a later step's text exactly as the uninterrupted one)."""
    return {int(m.group(1)): m.group(2) for m in
            re.finditer(r"^step\s+(\d+)/\d+ \| (loss \S+ \| grad norm \S+)", text, re.M)}


def worst_rel(got, ref):
    """The largest relative difference of got's losses from ref's.  A step
    ref lacks counts as 1.0, and so does an empty got: no losses never
    compare as equal."""
    if not got:
        return 1.0
    w = 0.0
    for k, v in got.items():
        r = float(ref.get(k, "nan"))
        rel = abs(float(v) - r) / max(abs(r), 1e-30)
        w = max(w, rel if rel == rel else 1.0)
    return w


def config_lines(binary, kind):
    """The stage config records of one kind, from the binary's strings."""
    data = open(binary, "rb").read()
    return [m.decode() for m in re.findall(rb"(?m)^" + kind.encode() + rb" [^\n\x00]*", data)]


def stages_txt(out):
    """hetc compile's out/stages.txt memory table: stage -> its row's fields
    (stage, ranks, slots, params, grads, optim, act/slot, scratch, arena MiB,
    planner GiB), as text."""
    rows = {}
    for line in open(os.path.join(out, "stages.txt")):
        f = line.split()
        if len(f) >= 10 and f[0].isdigit() and f[1].isdigit():
            rows[int(f[0])] = f
    return rows


def three_stages(plan, tps):
    """plan (a plan.json of a three-mesh cluster, as a dict) re-cut into
    three stages, one a mesh in sorted order: the embedding (layer 1) | the
    blocks | the final norm, head and loss (the last layer), DP 1, under
    the TP degrees tps[0..2].  A new dict; plan is not changed."""
    by_mesh = {s["mesh"]: s for s in plan["stages"]}
    last = max(s["layers"][1] for s in plan["stages"])
    q = json.loads(json.dumps(plan))
    meshes = sorted(by_mesh)
    st = []
    for k, (lay, wu) in enumerate((([1, 1], 2), ([2, last - 1], 2), ([last, last], 1))):
        s = dict(by_mesh[meshes[k]])
        s.update(index=k, layers=lay, dp=1, tp=tps[k], zero=0, recompute="none",
                 submesh=[1, tps[k]], warmup=wu)
        st.append(s)
    q["stages"] = st
    return q


def tp_pair(plan):
    """tiny_pair's planned two stages re-cut as stages_tp's hand-written plan:
    layers 1-9 under TP 2, layers 10-18 under DP 2 x TP 2, on the planner's
    meshes (its rows dropped: hetc compile derives them).  A new dict."""
    q = json.loads(json.dumps(plan))
    s0, s1 = q["stages"][0], q["stages"][1]
    s0.update(layers=[1, 9], dp=1, tp=2, warmup=2)
    s1.update(layers=[10, 18], dp=2, tp=2, warmup=1)
    for s in (s0, s1):
        s.pop("rows", None)
    q["stages"] = [s0, s1]
    return q


def one_stage(plan, tp):
    """plan re-cut into one stage holding every layer under DP 1 x TP tp, on
    the mesh of its stage with the most memory.  A new dict."""
    last = max(x["layers"][1] for x in plan["stages"])
    q = json.loads(json.dumps(plan))
    big = dict(max(q["stages"], key=lambda x: x["mem_capacity_bytes"]))
    big.update(index=0, layers=[1, last], dp=1, tp=tp, zero=0, recompute="none", warmup=1,
               delta=0)
    big.pop("rows", None)
    q["stages"], q["mesh_order"] = [big], [big["mesh"]]
    return q


def head_dp2(st):
    """Issue 17: planned in fp32, tiny_hetero's 16 blocks go to the two V100s
    (DP 2) and the head to the A100; the fp16 plan before it had them the
    other way round.  This test's shape is the latter: the blocks' stage DP 1
    (it gets TP 2 below), the head (last) stage DP 2, on the planner's meshes
    and warm-ups (hetc compile --plan runs any dp x tp as ranks).  Returns the
    blocks' stage."""
    big = max(range(len(st)), key=lambda s: st[s]["layers"][1] - st[s]["layers"][0])
    last = len(st) - 1
    if st[big]["dp"] == 2 and big != last and st[last]["dp"] == 1:
        st[big]["dp"], st[last]["dp"] = 1, 2
        st[big].pop("rows", None)
        st[last].pop("rows", None)
    return big


class StageTest:
    """One stage test: HETC and WORK from the command line (WORK emptied),
    the cluster (a file of examples/clusters or a path) and the batch shape
    its compiles and hetc train runs use.  horizon: hetc compile's --steps
    (the cosine schedule decays over it; None leaves --steps and the
    optimizer flags out).  model: the ONNX file compiled and trained
    (None: MODEL, looked up at each call)."""

    def __init__(self, cluster, seq=64, mb=4, gb=16, horizon=None, model=None):
        self.hetc, self.work = sys.argv[1], sys.argv[2]
        self.cluster, self.model = cluster, model
        self.seq, self.mb, self.gb, self.horizon = seq, mb, gb, horizon
        self.failures = []
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            print("FAIL:", msg, flush=True)
        return cond

    def run(self, cmd, quiet=False, timeout=900, pin="fp32", **kw):
        """Runs cmd, printing it; the tails of its output when it fails
        unless quiet (for commands expected to fail).  A hetc command is
        pinned to --precision `pin` unless it names one (hetc_cmd.pinned;
        pin=None: hetc's default)."""
        if cmd[0] == self.hetc:
            cmd = pinned(cmd, pin)
            kw["env"] = compiler_env(kw.get("env"))
        print("$", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if p.returncode and not quiet:
            print(p.stdout[-3000:], p.stderr[-3000:], sep="\n", flush=True)
        return p

    def compile(self, out, *extra, cluster=None, mb=None, gb=None, steps=None, quiet=False,
                timeout=600, pin="fp32"):
        """hetc compile of the model into out (extra before -o: --plan FILE ...).
        cluster: a file of examples/clusters or a path; pin: as run's."""
        cluster = os.path.join(CLUSTERS, cluster or self.cluster)
        steps = self.horizon if steps is None else steps
        sched = [] if steps is None else ["--steps", str(steps), *OPT]
        return self.run([self.hetc, self.model or MODEL, cluster, "--seq", str(self.seq),
                         "--microbatch", str(mb or self.mb), "--global-batch", str(gb or self.gb),
                         "--threads", "2", *sched, *extra, "-o", out], quiet=quiet, timeout=timeout,
                        pin=pin)

    def planned(self, out):
        """hetc compile with the planner's own plan into out: its plan.json
        as a dict (the template of hand-edited plans), None when the compile
        failed (a failure of the test)."""
        p = self.compile(out)
        if not self.check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
            return None
        return json.load(open(os.path.join(out, "plan.json")))

    def plan(self, out, label="hetc plan"):
        """hetc plan of the model onto the cluster (the compiles' batch
        shape) into out: its plan.json as a dict, None when it failed (a
        failure of the test)."""
        p = self.run([self.hetc, "plan", self.model or MODEL, os.path.join(CLUSTERS, self.cluster),
                      "--seq", str(self.seq), "--microbatch", str(self.mb), "--global-batch",
                      str(self.gb), "-o", out])
        if not self.check(p.returncode == 0, f"{label} exit {p.returncode}"):
            return None
        return json.load(open(os.path.join(out, "plan.json")))

    def train(self, steps, mb=None, accum=None):
        """`hetc train`, the oracle: one process, accum microbatches of mb rows a step."""
        mb = mb or self.mb
        accum = accum or self.gb // mb
        return self.run([self.hetc, "train", self.model or MODEL, "--data", DATA, "--steps", str(steps),
                         "--microbatch", str(mb), "--accum", str(accum), "--seq", str(self.seq),
                         *OPT, "--no-checkpoint"], timeout=900)

    def reference(self, steps, mb=None, accum=None):
        """hetc train's losses (a failed run is a failure of the test)."""
        ref = self.train(steps, mb, accum)
        self.check(ref.returncode == 0, "hetc train failed")
        return losses(ref.stdout)

    def launch(self, out, steps, *extra, timeout=900, **kw):
        """out/launch.sh on the tiny corpus for steps steps (extra: checkpoint flags;
        without --checkpoint-dir a new directory under WORK: a fresh run refuses
        a directory holding another run's checkpoints)."""
        if "--checkpoint-dir" not in extra:
            self.nlaunch = getattr(self, "nlaunch", 0) + 1
            extra = (*extra, "--checkpoint-dir", self.path("ckpt_launch_%d" % self.nlaunch))
        return self.run([os.path.join(out, "launch.sh"), "--data", DATA, "--steps", str(steps),
                         *extra], timeout=timeout, **kw)

    def run_killing(self, cmd, binary, after_step, limit_s=600, **kw):
        """Runs cmd (a launch.sh) and SIGKILLs binary's ranks once it prints
        step after_step (a rank dying mid-run).  Returns (exit status, stdout,
        stderr, whether it killed); the status is None and stderr empty when
        the job hung after the kill (a failure of the test)."""
        print("$", " ".join(cmd), f"(SIGKILL to {os.path.basename(binary)} after step {after_step})",
              flush=True)
        pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, **kw)
        seen, killed, t0 = "", False, time.time()
        while not killed and time.time() - t0 < limit_s:
            line = pr.stdout.readline()
            if not line:
                break
            seen += line
            m = re.match(r"step\s+(\d+)/", line)
            if m and int(m.group(1)) >= after_step:
                subprocess.run(["pkill", "-KILL", "-f", binary])
                killed = True
        try:
            rest, err = pr.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(pr.pid, signal.SIGKILL)  # its own session: launch.sh and the ranks
            pr.wait()
            self.check(False, "the job hung after a rank died")
            return None, seen, "", killed
        return pr.returncode, seen + rest, err, killed

    def expect_losses(self, p, label, ref, steps=None, n=None, tol=1e-5, as_text=False):
        """A launch.sh run p that must exit 0 and print losses equal to ref's
        to tol relative; steps: the step numbers it must print, n: how many
        loss lines.  Returns (its losses, the largest relative difference)."""
        self.check(p.returncode == 0, f"{label}: exit {p.returncode}")
        got = losses(p.stdout, as_text)
        if steps is not None:
            self.check(sorted(got) == list(steps), f"{label}: steps {sorted(got)}")
        if n is not None:
            self.check(len(got) == n, f"{label}: {len(got)} loss lines of {n}")
        w = worst_rel(got, ref)
        self.check(w <= tol, f"{label} vs hetc train: max relative difference {w:.3g} > {tol:g}")
        return got, w

    def expect_run(self, out, steps, ref, label, *extra, shown=None, tol=1e-5,
                   falling="loss is not falling"):
        """out/launch.sh for steps steps (extra: checkpoint flags): it must
        exit 0 and print steps losses equal to ref's to tol relative, the
        last below the first.  Prints the comparison (as shown, default
        label).  Returns (its losses, the largest relative difference)."""
        p = self.launch(out, steps, *extra)
        got, w = self.expect_losses(p, label, ref, n=steps, tol=tol)
        print(f"{shown or label}: {len(got)} steps == hetc train to {w:.2g} relative "
              f"(step 1 {got.get(1)}, step {steps} {got.get(steps)})", flush=True)
        self.check(got.get(steps, 99) < got.get(1, 0), falling)
        return got, w

    def expect_resume(self, out, ckpt, copy, step, ref, name, prefix=""):
        """A copy (at copy) of the checkpoint directory ckpt resumed by
        out/launch.sh up to step: it must print step `step` alone, its loss
        equal to ref's to 1e-5 relative.  Checkpoints are stored unsharded,
        so out may split the model differently from the run that wrote
        them.  Returns its losses."""
        shutil.copytree(ckpt, copy)
        p = self.launch(out, step, "--checkpoint-dir", copy, "--resume")
        more, w = self.expect_losses(p, f"{prefix}resume under {name}", ref, steps=[step])
        print(f"{prefix}resumed under {name}: step {step} loss {more.get(step)} == hetc train "
              f"to {w:.2g}", flush=True)
        return more

    def expect_same_resume(self, out, ckpt, p, at, last, label):
        """A copy of the checkpoint directory ckpt without step last's
        checkpoint, resumed by out/launch.sh to step last: steps at+1..last
        must print the uninterrupted run p's loss and grad-norm text
        exactly.  Returns whether they did."""
        ckr = self.path(os.path.basename(ckpt) + "_resume")
        shutil.copytree(ckpt, ckr)
        shutil.rmtree(os.path.join(ckr, "step_%08d" % last), ignore_errors=True)
        r = self.launch(out, last, "--checkpoint-dir", ckr, "--resume", timeout=600)
        want = {k: v for k, v in step_lines(p.stdout).items() if k > at}
        res = step_lines(r.stdout)
        ok = r.returncode == 0 and len(want) == last - at and res == want
        self.check(ok, f"{label} resumed from step {at}: exit {r.returncode}, {res} != {want}")
        return ok

    def finish(self):
        print("FAILED" if self.failures else "OK", len(self.failures), "failures")
        sys.exit(1 if self.failures else 0)
