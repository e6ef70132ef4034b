"""SGD in stage binaries (issue 15): the update graph's elementwise ops may
now write a parameter in place (the last Sub of a parameter read nowhere
else takes its buffer: HxOpEntry.inplace, memplan.c mark_inplace), which
the AdamW-only tests do not exercise.  gpt_tiny onto tiny_hetero.yaml with
--optimizer sgd (momentum 0.9, weight decay 0.1 on matrices, the cosine
schedule of the other stage tests), 8 steps: every step's loss equals
`hetc train --optimizer sgd` (one process, same microbatching) to 1e-5;
and once more without momentum (the plain p - lr d form).

usage: test_stages_sgd.py HETC WORKDIR
"""
import json
import os
import sys

import stagetest
from stagetest import StageTest

STEPS = 8
t = StageTest("tiny_hetero.yaml", horizon=STEPS)
check = t.check
base_opt = list(stagetest.OPT)

for name, flags in (("momentum", ["--optimizer", "sgd"]),
                    ("plain", ["--optimizer", "sgd", "--momentum", "0"])):
    stagetest.OPT = base_opt + flags  # both the compile and the hetc train oracle
    out = t.path(name)
    p = t.compile(out)
    if not check(p.returncode == 0, f"{name}: hetc compile exit {p.returncode}"):
        continue
    K = json.load(open(os.path.join(out, "plan.json")))["microbatches"]
    ref = t.reference(STEPS, accum=K)
    p = t.launch(out, STEPS, timeout=600)
    got, worst = t.expect_losses(p, f"sgd {name}", ref, n=STEPS)
    print(f"sgd {name}: {len(got)} steps == hetc train to {worst:.2g}", flush=True)
stagetest.OPT = base_opt
t.finish()
