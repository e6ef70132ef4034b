"""Stage binaries whose nodes are direct kernel calls (codegen/lower_node.c)
against the same binaries with every node interpreted (hetc compile
--interpret-nodes, the runtime's hetrt_node): the counts hetc compile reports
per stage agree with the generated code, gpt_tiny has no interpreted node
left, and both builds train bit-identically (the same kernels on the same
bytes: the losses' printed digits are equal).  And what each binary holds
(nm / strings): a direct build's stage binaries carry no IR text and define
no IR parser, host executor or node interpreter (they link hetrt and the
kernels alone, DESIGN section 2); the --interpret-nodes build's carry both.

    test_direct_calls.py HETC WORKDIR

Models: examples/gpt_tiny.onnx and two Hugging Face exports of tests/hf,
compiled onto examples/clusters/tiny_hetero.yaml; gpt_tiny and the LLaMA
export also under --precision bf16-mixed, whose generated kernels load,
round and store bf16 (bf16-mixed's Casts fused: some kernel of the build
must hold a bf16 rounding), bit-identical to the interpreted Casts too.  That the stage binaries
train like `hetc train` (and PyTorch) is tests/stages' and tests/hf's check;
the direct build is what they run.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "stages"))
import stagetest  # noqa: E402

HF = os.path.join(stagetest.SRC, "tests", "hf")
# model, seq, microbatch, global batch, steps, whether no node may be interpreted, precision
LLAMA = os.path.join(HF, "llama_random_torchscript.onnx")
MODELS = [
    (stagetest.MODEL, 64, 4, 16, 4, True, "fp32"),
    (os.path.join(HF, "gpt2_random_dynamo.onnx"), 16, 2, 4, 3, True, "fp32"),
    (LLAMA, 16, 2, 4, 3, True, "fp32"),
    (stagetest.MODEL, 64, 4, 16, 4, True, "bf16-mixed"),
    (LLAMA, 16, 2, 4, 3, True, "bf16-mixed"),
]
KERN_RE = re.compile(r"^stage (\d+): (\d+) nodes as direct kernel calls, (\d+) interpreted",
                     re.M)


FUSED_RE = re.compile(r"^stage (\d+): .*\n  fused: (\d+) of them in (\d+) generated", re.M)


def fused_counts(out):
    """stages.txt's `  fused: F of them in G generated ...` lines: {stage: (F, G)}."""
    txt = open(os.path.join(out, "stages.txt")).read()
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in FUSED_RE.finditer(txt)}


def ll_fused_loops(out, stage):
    """generated kernels' baseline loops (@fused_sK_*.rows) defined in stage_K.ll: one per
    kernel (the kernel itself may be inlined into its caller, its loop functions are not)"""
    ll = open(os.path.join(out, "stage_%d.ll" % stage)).read()
    return len(re.findall(r"^define internal void @fused_s%d_[tu]_\d+\.rows\(" % stage, ll, re.M))


def kernel_counts(out):
    """stages.txt's `stage K: D nodes as direct ..., I interpreted` lines."""
    txt = open(os.path.join(out, "stages.txt")).read()
    return {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in KERN_RE.finditer(txt)}


def ll_calls(out, stage, callee):
    """How many calls of callee stage_K.ll makes."""
    ll = open(os.path.join(out, "stage_%d.ll" % stage)).read()
    return len(re.findall(r"call i32 @%s\(" % callee, ll))


# what the node interpreter brings (interp/, the IR parser, codegen/hostexec)
INTERP_SYMS = ["hetrt_node", "hetrt_interp_open", "ir_parse", "ir_graph_free",
               "hexec_call_node_into"]
# the embedded IR text: a graph header, value declarations (ir/print.c)
IR_TEXT_RE = re.compile(r"^graph \S+ opset=\d+ \{$|^  (const|param|input) %\S+ : ", re.M)


def binary_holds(exe):
    """(interpreter symbols exe defines, lines of IR text in its strings)."""
    nm = subprocess.run(["nm", "--defined-only", exe], capture_output=True, text=True,
                        check=True).stdout
    defined = {ln.split()[-1] for ln in nm.splitlines() if len(ln.split()) >= 3}
    strings = subprocess.run(["strings", "-n", "6", exe], capture_output=True, text=True,
                             check=True).stdout
    return sorted(set(INTERP_SYMS) & defined), len(IR_TEXT_RE.findall(strings))


def check_holds(t, name, d, i, stages):
    for s in stages:
        dsyms, dtext = binary_holds(os.path.join(d, "stage_%d" % s))
        isyms, itext = binary_holds(os.path.join(i, "stage_%d" % s))
        print("%s stage %d: direct defines %s, %d IR text lines; interpreted defines %s, %d"
              % (name, s, dsyms, dtext, isyms, itext), flush=True)
        t.check(not dsyms and not dtext, "%s stage %d: the direct binary defines %s and holds %d "
                "lines of IR text" % (name, s, dsyms, dtext))
        t.check(isyms == sorted(INTERP_SYMS) and itext > 0, "%s stage %d: the --interpret-nodes "
                "binary defines %s of %s and holds %d lines of IR text" % (
                    name, s, isyms, INTERP_SYMS, itext))


def main():
    t = stagetest.StageTest("tiny_hetero.yaml")
    for model, seq, mb, gb, steps, want_none, prec in MODELS:
        name = os.path.basename(model)[:-5] + ("" if prec == "fp32" else "_" + prec)
        t.model, t.seq, t.mb, t.gb = model, seq, mb, gb
        d, i = t.path(name, "direct"), t.path(name, "interp")
        pr = ("--precision", prec)
        if not t.check(t.compile(d, "--emit-llvm", *pr).returncode == 0, name + ": compile"):
            continue
        plan = os.path.join(d, "plan.json")  # the same plan for both builds
        if not t.check(t.compile(i, "--plan", plan, "--emit-llvm", "--interpret-nodes", *pr)
                       .returncode == 0, name + ": compile --interpret-nodes"):
            continue
        if prec == "bf16-mixed":
            # bf16-mixed's Casts in the generated kernels: bf16 loads, roundings, stores
            txt = "".join(open(os.path.join(d, f)).read() for f in sorted(os.listdir(d))
                          if f.endswith(".fused.txt"))
            nr, nbi = len(re.findall(r"= rbf16 ", txt)), len(re.findall(r" in\d+ bf16 ", txt))
            print("%s: %d bf16 roundings and %d bf16 inputs in the generated kernels"
                  % (name, nr, nbi), flush=True)
            t.check(nr > 0 and nbi > 0, "%s: no bf16 Cast in a generated kernel" % name)
        kd, ki = kernel_counts(d), kernel_counts(i)
        t.check(kd and sorted(kd) == sorted(ki), "%s: stage kernel lines %s / %s" % (name, kd, ki))
        for s in sorted(kd):
            direct, interp = kd[s]
            # the interpreted build calls hetrt_node once per node (TpAllReduce
            # aside); the direct build once per node it could not lower
            total = ll_calls(i, s, "hetrt_node")
            print("%s stage %d: %d direct, %d interpreted of %d nodes" % (name, s, direct, interp,
                                                                           total), flush=True)
            t.check(ki[s] == (0, total), "%s stage %d: --interpret-nodes reports %s, its code "
                    "calls hetrt_node %d times" % (name, s, ki[s], total))
            t.check(ll_calls(d, s, "hetrt_node") == interp, "%s stage %d: %d interpreted, the "
                    "code calls hetrt_node %d times" % (name, s, interp,
                                                        ll_calls(d, s, "hetrt_node")))
            t.check(direct + interp == total, "%s stage %d: %d + %d nodes of %d" % (
                name, s, direct, interp, total))
            if want_none:
                t.check(interp == 0, "%s stage %d: %d nodes interpreted" % (name, s, interp))
            # generated kernels: as many loops in the code as hetc reports, none
            # without direct calls (the losses below compare them with the executor)
            nf, nk = fused_counts(d).get(s, (0, 0))
            t.check(ll_fused_loops(d, s) == nk and (nk == 0) == (nf == 0),
                    "%s stage %d: %d generated kernels reported, %d in the code" % (
                        name, s, nk, ll_fused_loops(d, s)))
            t.check(ll_fused_loops(i, s) == 0 and not fused_counts(i),
                    "%s stage %d: --interpret-nodes has generated kernels" % (name, s))
        if want_none:
            check_holds(t, name, d, i, sorted(kd))
        rd, ri = t.launch(d, steps), t.launch(i, steps)
        if t.check(rd.returncode == 0 and ri.returncode == 0, name + ": launch"):
            ld, li = stagetest.losses(rd.stdout, True), stagetest.losses(ri.stdout, True)
            t.check(len(ld) == steps and ld == li, "%s: direct losses %s, interpreted %s" % (
                name, ld, li))
    t.finish()


if __name__ == "__main__":
    main()
