"""The training precision and engine of the tests' hetc command lines.

hetc train, hetc plan and hetc [compile] default to --precision bf16-mixed
(driver/precision.h).  The reference and equivalence tests compare at fp32
tolerances (launch.sh vs hetc train to 1e-5, onnxruntime / PyTorch fp32
oracles, planner memory and time computed for fp32), so their harnesses
run every hetc command through pinned(): `--precision fp32` unless the
command names a precision itself (the bf16-mixed tests name theirs).  A
check of the default itself passes pin=None to its harness's run, which
leaves the command as written.

hetc train runs the compiled one-stage program by default (issue 15 item 4:
`--engine compiled`, the stage binaries' code).  pinned() gives hetc train
`--engine executor` unless the command names an engine: the reference and
equivalence tests compare the stage binaries (compiled) with hetc train,
and with the executor there the two sides are different code -- the host
executor's node adapters against the generated program -- each checked
against PyTorch on its own (tests/train/test_train_compiled.py checks the
compiled engine against PyTorch and the executor; tests/stages, tests/hf's
launch step the stage binaries).  A check of the defaults (pin=None) gets
neither pin.
"""

# the hetc commands that take --precision; the top-level `hetc MODEL.onnx
# CLUSTER.yaml` form is hetc compile's
PRECISION_COMMANDS = ("train", "plan", "compile")


def takes_precision(cmd):
    """cmd (hetc's argv) is a command with a --precision option"""
    return len(cmd) >= 2 and (cmd[1] in PRECISION_COMMANDS or str(cmd[1]).endswith(".onnx"))


def names_precision(cmd):
    return any(a == "--precision" or a.startswith("--precision=") for a in map(str, cmd))


def names_engine(cmd):
    return any(a == "--engine" or a.startswith("--engine=") for a in map(str, cmd))


def pinned(cmd, precision="fp32", engine="executor"):
    """cmd (a list, cmd[0] the hetc binary) with `--precision PRECISION`
    after the subcommand (or after MODEL.onnx, for the top-level form),
    where it takes one and names none, and a hetc train command with
    `--engine ENGINE` where it names none; precision None: cmd unchanged
    (a check of the defaults), engine None: the engine unchanged."""
    cmd = list(cmd)
    if precision is None:  # a check of the defaults: the command as written
        return cmd
    if (engine is not None and len(cmd) >= 2 and cmd[1] == "train" and
            not names_engine(cmd)):
        cmd = cmd[:2] + ["--engine", engine] + cmd[2:]
    if precision is None or not takes_precision(cmd) or names_precision(cmd):
        return cmd
    return cmd[:2] + ["--precision", precision] + cmd[2:]
