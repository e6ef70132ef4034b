"""hetc train --precision bf16-mixed against PyTorch autocast (issue 17),
on the GPT-2-style (gpt2_op17.onnx: LayerNorm, GELU, tied head) and the
LLaMA-style (llama_op17.onnx: RMSNorm, rotary, GQA, SwiGLU, untied head)
test models:

  - tests/models/<name>.bf16_ref.npz (tools/torch_reference.py --autocast-bf16:
    the model's own torch code, fp32 master weights, the forward under
    torch.autocast("cpu", dtype=torch.bfloat16), AdamW, clip 1.0) gives the
    20-step loss trajectory; hetc train --precision bf16-mixed on the same
    weights and batches must follow it: mean relative error < 1.5 % and
    every step within 3 % (seed 002 Sec. 3.1.2's criterion);
  - the bf16 run is not the fp32 run: its losses differ from
    hetc train --precision fp32's (bf16 that silently ran fp32 fails here);
    and at step 1 (the forward of the same weights) it equals torch's
    emulation of hetc's own casts (loss_linear_bf16: only the Linears
    rounded, fp32 accumulation) to a tenth of the bf16 effect; on GPT-2 it
    also moves the loss away from fp32's in the direction torch's autocast
    does, ending nearer torch's than fp32 is (on these small models the
    whole bf16 effect is ~5e-4..2e-3, well inside the 1.5 % criterion, so
    the criterion alone cannot tell bf16 from fp32; on the LLaMA autocast's
    extra roundings -- attention's matmuls, rotary and SwiGLU on bf16
    values -- move it the other way);
  - --dump-ir-after=mixed-precision shows Cast nodes to bf16 and Linears
    with bf16 values, no GEMM (MatMul, Gemm, Linear) left in f32, and the
    fp32 run's IR has none;
  - --bf16-rounding stochastic (check_sr): the same criterion, a small
    step-1 change from nearest, and `sr` on every weight Cast (forward and
    the backward's re-cast, one key) and on no other.

    test_train_bf16.py HETC SOURCE_DIR
"""
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HETC, SRC = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="hetc_bf16_")
atexit.register(shutil.rmtree, tmp, True)  # removed however the test ends
fails = []


def train(name, model, hp, precision, sr=False):
    out = os.path.join(tmp, name, precision + ("_sr" if sr else ""))
    cmd = [HETC, "train", model, "--data", os.path.join(SRC, hp["data"]),
           "--steps", str(hp["steps"]), "--microbatch", str(hp["batch"]), "--seq", str(hp["seq"]),
           "--optimizer", "adamw", "--lr", repr(hp["lr"]), "--beta1", repr(hp["betas"][0]),
           "--beta2", repr(hp["betas"][1]), "--adam-eps", repr(hp["eps"]),
           "--weight-decay", repr(hp["weight_decay"]), "--clip", repr(hp["clip"]),
           "--lr-schedule", hp["lr_schedule"], "--precision", precision,
           "--checkpoint-dir", os.path.join(out, "ckpt"), "-o", out,
           "--dump-ir-after=mixed-precision,autodiff" + (",stochastic-rounding" if sr else ""),
           "--exec-stats"] + (["--bf16-rounding", "stochastic"] if sr else [])
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if r.returncode:
        sys.exit("%s: hetc train --precision %s failed: %s" % (name, precision, r.stderr[-2000:]))
    got = re.findall(r"loss ([0-9.eE+-]+) \| grad norm", r.stdout)
    if len(got) != hp["steps"]:
        sys.exit("%s %s: %d step lines, expected %d" % (name, precision, len(got), hp["steps"]))
    irs = {f: open(os.path.join(out, "ir", f)).read() for f in os.listdir(os.path.join(out, "ir"))}
    arena = re.search(r"^exec: train arena (\d+) B", r.stdout, re.M)
    if not arena:
        sys.exit("%s %s: no 'exec: train arena' line (--exec-stats)" % (name, precision))
    return np.array(got, np.float64), irs, int(arena.group(1))


def check_model(name, onnx, autocast_direction):
    ref = np.load(os.path.join(SRC, "tests/models/%s.bf16_ref.npz" % name))
    hp = json.loads(str(ref["hparams"]))
    model = os.path.join(SRC, "tests/models", onnx)
    want = ref["traj_loss"]
    bf16, bf_ir, bf_arena = train(name, model, hp, "bf16-mixed")
    fp32, fp_ir, fp_arena = train(name, model, hp, "fp32")
    relerr = np.abs(bf16 - want) / np.abs(want)
    mean_e, max_e = float(relerr.mean()), float(relerr.max())
    if mean_e >= 0.015:
        fails.append("%s: bf16-mixed vs torch autocast: mean relative loss error %.3e >= 1.5%%"
                     % (name, mean_e))
    if max_e >= 0.03:
        fails.append("%s: bf16-mixed vs torch autocast: step %d off by %.3e >= 3%%"
                     % (name, int(relerr.argmax()) + 1, max_e))
    diff = float(np.max(np.abs(bf16 - fp32) / np.abs(fp32)))
    fp_e = float(np.mean(np.abs(fp32 - want) / np.abs(want)))
    # bf16 keeps 8 mantissa bits: its GEMMs move the loss by ~1e-4..1e-2 on
    # these models; fp32's sums reorder at ~1e-7.  Identical losses mean
    # nothing ran in bf16.
    if diff < 1e-5:
        fails.append("%s: bf16-mixed losses equal fp32's (max rel diff %.2e): bf16 did nothing"
                     % (name, diff))

    # step 1 is the forward of the same weights.  hetc's bf16 step-1 loss
    # must equal torch's emulation of hetc's own cast placement (only the
    # Linears' operands and outputs rounded to bf16, fp32 accumulation;
    # loss_linear_bf16) far closer than the whole bf16 effect: other
    # roundings, or none, fail.
    emu = float(ref["loss_linear_bf16"])
    e_lin, d_lin = abs(bf16[0] - emu), abs(emu - fp32[0])
    if not e_lin < 0.1 * d_lin:
        fails.append("%s step 1: hetc bf16 %.7g vs torch's emulation of its casts %.7g (off by "
                     "%.3e; the bf16 effect there is %.3e)" % (name, bf16[0], emu, e_lin, d_lin))
    # torch.autocast rounds in more places (attention's matmuls, the
    # elementwise ops on bf16 Linear outputs: rotary, SiLU * gate).  On
    # GPT-2 it moves the loss away from fp32's in the direction hetc's bf16
    # does, ending nearer torch's than fp32 is (an unrelated perturbation of
    # the same size would not); on the LLaMA its extra roundings outweigh
    # the Linears' and move it the other way (measured: autocast +1.0e-3,
    # hetc and the emulation -5.0e-4), so there only the criterion above
    # and the emulation apply.
    d_t, d_b = want[0] - fp32[0], bf16[0] - fp32[0]
    if autocast_direction and not (d_t * d_b > 0 and
                                   abs(bf16[0] - want[0]) < 0.5 * abs(fp32[0] - want[0])):
        fails.append("%s step 1: torch autocast moves the loss by %.3e from fp32, hetc bf16 by "
                     "%.3e" % (name, d_t, d_b))
    mp = [t for f, t in bf_ir.items() if "mixed-precision" in f]
    kept = []
    if len(mp) != 1:
        fails.append("%s: no IR dump after mixed-precision: %s" % (name, sorted(bf_ir)))
    else:
        casts = re.findall(r"= Cast\([^)]*\) \{to=16\} : bf16\[", mp[0])
        lin = re.findall(r"= Linear\([^)]*\) : bf16\[", mp[0])
        if len(casts) < 3 or len(lin) < 1:
            fails.append("%s mixed-precision IR: %d Casts to bf16, %d bf16 Linears"
                         % (name, len(casts), len(lin)))
        # every parameter GEMM is a Linear by now (canonicalize); what stays
        # f32 is a MatMul of two activations (none: attention is one fused op)
        kept = re.findall(r"= (MatMul|Gemm|Linear)\([^)]*\) : f32\[", mp[0])
        if kept:
            fails.append("%s mixed-precision IR: GEMMs left in f32: %s" % (name, kept))
        ad = [t for f, t in bf_ir.items() if "autodiff" in f]
        if not ad or not re.search(r"= LinearGrad\([^)]*\) : grad bf16\[", ad[0]):
            fails.append("%s: autodiff IR has no bf16 LinearGrad" % name)
    # memory: the backward keeps the bf16 Linear operands instead of their
    # f32 sources, re-casts the weights (the fp32 master copy is resident)
    # and the f32 views of bf16 outputs rather than keeping them, so the
    # executor's train arena (forward + backward, liveness-packed) must be
    # smaller than fp32's -- bf16 that costs memory fails here
    if not bf_arena < fp_arena:
        fails.append("%s: bf16-mixed train arena %d B is not smaller than fp32's %d B"
                     % (name, bf_arena, fp_arena))
    if len(mp) == 1 and not re.search(r"= LinearGrad\(%[^,]*, %re/", ad[0]):
        fails.append("%s: no LinearGrad reads a weight re-cast in the backward (re/...)" % name)
    if any("mixed-precision" in f for f in fp_ir) or \
            any(re.search(r": (grad )?bf16\[", t) for t in fp_ir.values()):
        fails.append("%s: the fp32 run ran mixed-precision or holds bf16 values" % name)

    print("%s: bf16-mixed vs torch autocast (%s): mean rel err %.3e, max step %.3e; "
          "fp32 vs the same reference %.3e; bf16 vs fp32 max rel diff %.3e; step 1: autocast "
          "- fp32 %.3e, hetc bf16 - fp32 %.3e, hetc bf16 - torch emulation of its casts %.2e; "
          "%d bf16 Linears; train arena %d B bf16-mixed, %d B fp32 (%+.1f%%)"
          % (name, hp["torch"], mean_e, max_e, fp_e, diff, d_t, d_b, bf16[0] - emu,
             len(re.findall(r"= Linear\([^)]*\) : bf16\[", mp[0])) if len(mp) == 1 else -1,
             bf_arena, fp_arena, 100.0 * (bf_arena / fp_arena - 1)))
    print("  losses  torch:", np.round(want, 5).tolist())
    print("          bf16 :", np.round(bf16, 5).tolist())
    check_sr(name, model, hp, want, bf16)


def check_sr(name, model, hp, want, bf16):
    """--bf16-rounding stochastic: the same criterion against torch's
    autocast; step 1 differs from round-to-nearest (the weight copies were
    rounded otherwise) by about as much as the Linears' roundings move it,
    not more (at most 10x the bf16 - fp32 spread of the trajectory); every
    parameter's Cast to bf16 carries sr after the pass, the activations'
    none, and the backward's re-cast of a weight the same key."""
    sr, irs, _ = train(name, model, hp, "bf16-mixed", sr=True)
    relerr = np.abs(sr - want) / np.abs(want)
    if relerr.mean() >= 0.015 or relerr.max() >= 0.03:
        fails.append("%s: --bf16-rounding stochastic vs torch autocast: mean %.3e, worst %.3e"
                     % (name, relerr.mean(), relerr.max()))
    d1 = abs(sr[0] - bf16[0]) / abs(bf16[0])
    if not 1e-7 < d1 < 1e-2:
        fails.append("%s: stochastic rounding moved step 1 by %.3e relative to nearest (want "
                     "1e-7 .. 1e-2: it rounds the weight copies, a small change)" % (name, d1))
    ir = [t for f, t in irs.items() if "stochastic-rounding" in f]
    ad = [t for f, t in irs.items() if "autodiff" in f]
    if len(ir) != 1 or len(ad) != 1:
        fails.append("%s: no IR dump after stochastic-rounding / autodiff: %s" % (name, sorted(irs)))
        return
    # which values are parameters: the dump's `param` declarations
    params = set(re.findall(r"^\s*param %(\S+) :", ir[0], re.M))
    casts = re.findall(r"^\s*%\S+ = Cast\(%(\S+?)\) \{([^}]*)\} : bf16\[", ir[0], re.M)
    wsr = [(x, a) for x, a in casts if x in params]
    if not wsr or any(not re.search(r"\bsr=\d+", a) for x, a in wsr):
        fails.append("%s: parameter Casts without sr after stochastic-rounding: %s"
                     % (name, [x for x, a in wsr if "sr=" not in a][:4] or "none found"))
    if any("sr=" in a for x, a in casts if x not in params):
        fails.append("%s: an activation's Cast got sr" % name)
    keys = {x: re.search(r"sr=(\d+)", a).group(1) for x, a in wsr if "sr=" in a}
    re_casts = re.findall(r"^\s*%re/\S+ = Cast\(%(\S+?)\) \{([^}]*)\} : bf16\[", ad[0], re.M)
    bad = [x for x, a in re_casts if x in keys and "sr=%s" % keys[x] not in a]
    if not re_casts or bad:
        fails.append("%s: backward re-casts of weights without the forward's key: %s (of %d)"
                     % (name, bad[:4], len(re_casts)))
    print("%s: --bf16-rounding stochastic vs torch autocast: mean rel err %.3e, max step %.3e; "
          "step 1 vs nearest %.2e; %d weight Casts with sr, %d backward re-casts with their key"
          % (name, relerr.mean(), relerr.max(), d1, len(wsr), len(re_casts)))


check_model("gpt2", "gpt2_op17.onnx", True)
check_model("llama", "llama_op17.onnx", False)
if fails:
    print("\n".join(fails))
    sys.exit(1)
print("OK")
