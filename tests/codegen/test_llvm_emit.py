"""End to end: a hand-built stage program -> LLVM -> object -> linked
executable (codegen_emit_demo), run on a random arena image; the final
arena must equal the same schedule computed by numpy.

usage: test_llvm_emit.py EMIT_DEMO WORKDIR LLVM_AS|- CC [LINK_ARGS...]
"""
import os
import re
import subprocess
import sys

import numpy as np

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def emit(tool, mode, outdir, cc, link):
    os.makedirs(outdir, exist_ok=True)
    r = subprocess.run([tool, mode, outdir, cc] + link, capture_output=True, text=True)
    assert r.returncode == 0, f"emit {mode} failed:\n{r.stderr}"
    lay = {}
    for line in open(os.path.join(outdir, "layout.txt")):
        k, *v = line.split()
        lay[k] = v if k == "schedule" else int(v[0])
    return lay


def numpy_oracle(lay, arena):
    """Runs the schedule the way test_rt.c does, with numpy kernels."""
    M, K, N = lay["M"], lay["K"], lay["N"]
    f32 = np.float32

    def view(off, shape):
        return arena[off // 4: off // 4 + int(np.prod(shape))].reshape(shape)

    W, b, W2 = view(lay["W"], (K, N)), view(lay["b"], (N,)), view(lay["W2"], (N, N))
    acc = np.full((M, N), 0.25, dtype=np.float64)
    z = {}
    for e in lay["schedule"]:
        kind, mb = e[0], int(e[1:])
        s = mb % lay["nslots"]
        base = lay["slot_base"] + s * lay["slot_bytes"]
        if kind == "F":
            x = view(base + lay["x"], (M, K)).astype(np.float64)
            hh = 0.5 * (x @ W.astype(np.float64)) + b
            z[s] = np.maximum(hh, 0.0) @ W2.astype(np.float64)
        else:
            acc += z[s]
    return acc.astype(f32)


def main():
    tool, work, llvm_as, cc = sys.argv[1:5]
    link = sys.argv[5:]
    good = os.path.join(work, "good")
    lay = emit(tool, "good", good, cc, link)

    # The .ll is written and is valid LLVM IR by an independent parser.
    ll = os.path.join(good, "stage.ll")
    text = open(ll).read()
    for needle in ("define i32 @stage_forward(i8* %arena, i8* %slot)",
                   "define i32 @main(", "@hetc_schedule", "@hetc_stage",
                   "@hetc_config = private unnamed_addr constant",
                   "call i32 @hk_gemm_f32(", "call void @hk_linear_f32("):
        assert needle in text, f"{needle!r} missing from {ll}"
    if llvm_as != "-":
        r = subprocess.run([llvm_as, ll, "-o", os.devnull], capture_output=True, text=True)
        assert r.returncode == 0, f"llvm-as rejected {ll}:\n{r.stderr}"

    rng = np.random.default_rng(7)
    arena = rng.standard_normal(lay["arena_bytes"] // 4).astype(np.float32)
    inp, out = os.path.join(good, "in.bin"), os.path.join(good, "out.bin")
    arena.tofile(inp)
    r = subprocess.run([os.path.join(good, "stage"), inp, out], capture_output=True, text=True)
    assert r.returncode == 0, f"stage binary failed ({r.returncode}):\n{r.stdout}{r.stderr}"
    assert r.stdout.split() == lay["schedule"], (r.stdout, lay["schedule"])
    # ABI 2 (and 3): the descriptor's texts arrive intact (NULL ir_train
    # as ""), the version is the header's.
    abi = re.search(r"#define HETC_STAGE_ABI_VERSION (\d+)",
                    open(os.path.join(SRC, "runtime", "abi", "stage_abi.h")).read()).group(1)
    want_abi = "abi %s ir_train 0 ir_update %d config %d" % (abi, lay["ir_update_len"],
                                                            lay["config_len"])
    assert want_abi in r.stderr, (want_abi, r.stderr)
    got = np.fromfile(out, dtype=np.float32)
    assert got.size == arena.size
    M, N = lay["M"], lay["N"]
    a = lay["acc"] // 4
    want = numpy_oracle(lay, arena)
    np.testing.assert_allclose(got[a:a + M * N].reshape(M, N), want, rtol=1e-5, atol=1e-5)
    # Parameters are read-only in this program: untouched bytes stay equal.
    np.testing.assert_array_equal(got[:a], arena[:a])

    # A kernel's error status stops the stage function; the runtime gets
    # the failing call's index and names it from the descriptor table.
    bad = os.path.join(work, "bad")
    emit(tool, "bad", bad, cc, link)
    arena.tofile(os.path.join(bad, "in.bin"))
    r = subprocess.run([os.path.join(bad, "stage"), os.path.join(bad, "in.bin"),
                        os.path.join(bad, "out.bin")], capture_output=True, text=True)
    assert r.returncode != 0
    assert "stage function forward: call 1 (hk_unary) failed" in r.stderr, r.stderr
    # ... and prints the kernel's reason, from the module's error buffer
    # (LE_ARG_ERRBUF: hetc_kernel_err, passed as hk_unary's err)
    assert "does not support dtype 0" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(bad, "out.bin"))
    print("ok")


if __name__ == "__main__":
    main()
