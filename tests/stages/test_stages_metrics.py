#!/usr/bin/env python3
"""Issue 19: metrics.jsonl, validation loss and the measured trace of a
pipeline run (examples/gpt_tiny.onnx on tiny_hetero: 3 stages, the last DP 2).

One launch.sh run with --trace --val-data --val-every is checked against
  - its own printed lines: metrics.jsonl has one line per step, in order, with
    every field, and its loss / grad norm / lr / val loss are the printed ones;
    per-stage times are non-negative and add up to no more than the step;
    the MFU is flops / step_s / peak_flops; the stages' ranks add up to the
    world; loss.svg is an SVG with the loss curve;
  - the stage binaries' schedule tables (stage_K --print-schedule): every
    rank's F/B spans in trace.json, step by step, are exactly its stage's
    table (every F and B of every microbatch, in order); trace.svg holds the
    last step's spans and the plan's predicted events (timeline.json's);
  - independent oracles of the validation loss: hetc train (one process) with
    the same --val-data at the same steps, and onnxruntime running the ONNX
    model that hetc train --export wrote after the last step on the same
    validation batches (cross-entropy in numpy).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stagetest import DATA, MODEL, OPT, StageTest, losses  # noqa: E402

STEPS, VAL_EVERY, VAL_BATCHES = 6, 3, 3
SVG = "{http://www.w3.org/2000/svg}"

t = StageTest("tiny_hetero.yaml", horizon=STEPS)
out = t.path("build")
p = t.compile(out)
t.check(p.returncode == 0, f"hetc compile exit {p.returncode}")

# a validation file: the corpus's last 6000 tokens, llm.c layout
with open(DATA, "rb") as f:
    hdr = struct.unpack("<256i", f.read(1024))
    tok = np.frombuffer(f.read(), dtype="<u2")
val = tok[-6000:]
VAL = t.path("val.bin")
with open(VAL, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(val), *([0] * 253)))
    f.write(val.astype("<u2").tobytes())

ckpt = t.path("ckpt")
p = t.launch(out, STEPS, "--checkpoint-dir", ckpt, "--checkpoint-every", "3", "--trace",
             "--val-data", VAL, "--val-every", str(VAL_EVERY), "--val-batches", str(VAL_BATCHES))
t.check(p.returncode == 0, f"launch.sh exit {p.returncode}")
printed = {int(m.group(1)): m.group(2) for m in
           re.finditer(r"^step\s+(\d+)/\d+ \| loss \S+ \| grad norm (\S+)", p.stdout, re.M)}
printed_lr = {int(m.group(1)): float(m.group(2)) for m in
              re.finditer(r"^step\s+(\d+)/\d+ \| .*\| lr (\S+)", p.stdout, re.M)}
vals = {int(m.group(1)): float(m.group(2)) for m in
        re.finditer(r"^step\s+(\d+)/\d+ \| val loss (\S+)", p.stdout, re.M)}
loss_txt = losses(p.stdout, as_text=True)
want_val_steps = sorted({k for k in range(1, STEPS + 1) if k % VAL_EVERY == 0} | {STEPS})
t.check(sorted(vals) == want_val_steps, f"val loss lines at steps {sorted(vals)}")

# ---- metrics.jsonl
mpath = os.path.join(ckpt, "metrics.jsonl")
lines = [json.loads(l) for l in open(mpath)] if os.path.exists(mpath) else []
t.check([m["step"] for m in lines] == list(range(1, STEPS + 1)),
        f"metrics.jsonl steps {[m.get('step') for m in lines]}")
keys = {"step", "loss", "grad_norm", "lr", "tokens", "step_s", "tokens_per_s", "flops",
        "peak_flops", "mfu", "mfu_nominal", "stages"}
world = 0
for m in lines:
    k = m["step"]
    t.check(keys <= set(m), f"step {k}: missing {keys - set(m)}")
    t.check("%.9g" % m["loss"] == loss_txt.get(k), f"step {k}: loss {m['loss']} vs printed "
            f"{loss_txt.get(k)}")
    t.check("%.6g" % m["grad_norm"] == printed.get(k), f"step {k}: grad norm {m['grad_norm']}")
    t.check(float("%.4e" % m["lr"]) == printed_lr.get(k), f"step {k}: lr {m['lr']}")
    t.check(m["tokens"] == 16 * 64, f"step {k}: tokens {m['tokens']}")
    t.check(abs(m["tokens_per_s"] * m["step_s"] - m["tokens"]) <= 1e-6 * m["tokens"],
            f"step {k}: tokens_per_s x step_s != tokens")
    t.check(m["flops"] > 0 and m["peak_flops"] > 0 and m["mfu_nominal"] is True,
            f"step {k}: flops {m['flops']} peak {m['peak_flops']} nominal {m['mfu_nominal']}")
    t.check(abs(m["mfu"] - m["flops"] / m["step_s"] / m["peak_flops"]) <= 1e-9 * m["mfu"],
            f"step {k}: mfu {m['mfu']}")
    t.check(("val_loss" in m) == (k in vals), f"step {k}: val_loss present {'val_loss' in m}")
    if k in vals:
        t.check("%.9g" % m["val_loss"] == "%.9g" % vals[k], f"step {k}: val_loss {m['val_loss']}")
    st = m["stages"]
    t.check([s["stage"] for s in st] == [0, 1, 2], f"step {k}: stages {st}")
    world = sum(s["ranks"] for s in st)
    for s in st:
        parts = [s["compute_s"], s["comm_s"], s["bubble_s"], s["other_s"]]
        t.check(min(parts) >= 0 and s["compute_s"] > 0, f"step {k} stage {s['stage']}: {parts}")
        t.check(s["arena_bytes"] > 0 and s["peak_rss_bytes"] > s["arena_bytes"],
                f"step {k} stage {s['stage']}: memory {s['arena_bytes']} {s['peak_rss_bytes']}")
t.check(world == 4, f"the stages' ranks add up to {world}, the plan has 4")
svg = os.path.join(ckpt, "loss.svg")
t.check(os.path.exists(svg) and any(e.tag == SVG + "polyline" for e in ET.parse(svg).iter()),
        "loss.svg with a polyline")

# ---- trace.json against the schedule tables
sched = {}
for s in range(3):
    q = subprocess.run([os.path.join(out, f"stage_{s}"), "--print-schedule"], capture_output=True,
                       text=True)
    t.check(q.returncode == 0, f"stage_{s} --print-schedule exit {q.returncode}")
    sched[s] = q.stdout.split(":", 1)[1].split()
trace_path = os.path.join(ckpt, "trace.json")
tr = json.load(open(trace_path)) if os.path.exists(trace_path) else {"traceEvents": []}
ev = tr["traceEvents"]
stage_of = {e["pid"]: int(re.search(r"stage (\d+)", e["args"]["name"]).group(1))
            for e in ev if e.get("name") == "process_name"}
t.check(sorted(stage_of) == [0, 1, 2, 3], f"trace ranks {sorted(stage_of)}")
xs = [e for e in ev if e.get("ph") == "X"]
for r, s in sorted(stage_of.items()):
    mine = sorted((e for e in xs if e["pid"] == r), key=lambda e: e["ts"])
    for k in range(1, STEPS + 1):
        fb = [e["args"]["kind"] + str(e["args"]["mb"]) for e in mine
              if e["args"]["step"] == k and e["args"]["kind"] in "FB"]
        t.check(fb == sched[s], f"rank {r} (stage {s}) step {k}: F/B spans {fb} vs the "
                f"schedule table {sched[s]}")
    kinds = {e["args"]["kind"] for e in mine}
    need = {"F", "B", "A", "U"} | ({"S", "W"} if s < 2 else set()) | ({"R", "W"} if s > 0 else set())
    t.check(need <= kinds, f"rank {r} (stage {s}): span kinds {sorted(kinds)} lack "
            f"{sorted(need - kinds)}")
    vf = [e for e in mine if e["args"]["kind"] == "V"]
    t.check(len(vf) == VAL_BATCHES * len(want_val_steps), f"rank {r}: {len(vf)} validation "
            "forwards")
    t.check(all(e["dur"] >= 0 for e in mine), f"rank {r}: negative durations")

# trace.svg: the last step's drawable spans under the plan's predicted events
pred = [e for e in json.load(open(os.path.join(out, "timeline.json")))["traceEvents"]
        if e.get("ph") == "X"]
drawn = [e for e in xs if e["args"]["step"] == STEPS and e["args"]["kind"] in "FBSRWA"]
root = ET.parse(os.path.join(ckpt, "trace.svg")).getroot()
rects = [e for e in root.iter(SVG + "rect") if "ev" in e.get("class", "").split()]
t.check(len(rects) == len(pred) + len(drawn), f"trace.svg: {len(rects)} event rects vs "
        f"{len(pred)} predicted + {len(drawn)} measured")

# ---- validation loss vs hetc train and onnxruntime
exported = t.path("trained.onnx")
q = t.run([t.hetc, "train", MODEL, "--data", DATA, "--steps", str(STEPS), "--microbatch", "4",
           "--accum", "4", "--seq", "64", *OPT, "--no-checkpoint", "--metrics",
           t.path("train_metrics.jsonl"), "--val-data", VAL, "--val-every", str(VAL_EVERY),
           "--val-batches", str(VAL_BATCHES), "--export", exported])
t.check(q.returncode == 0, f"hetc train exit {q.returncode}")
ref_val = {int(m.group(1)): float(m.group(2)) for m in
           re.finditer(r"^step\s+(\d+)/\d+ \| val loss (\S+)", q.stdout, re.M)}
for k in want_val_steps:
    a, b = vals.get(k, float("nan")), ref_val.get(k, float("nan"))
    t.check(abs(a - b) <= 1e-5 * abs(b), f"step {k}: pipeline val loss {a} vs hetc train {b}")
tm = [json.loads(l) for l in open(t.path("train_metrics.jsonl"))]
t.check([m["step"] for m in tm] == list(range(1, STEPS + 1)), "hetc train metrics.jsonl steps")
t.check(all(("val_loss" in m) == (m["step"] in ref_val) for m in tm), "hetc train val_loss keys")

import onnxruntime as ort  # noqa: E402
sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
B, T = 4, 64
tot = []
for b in range(VAL_BATCHES):
    chunk = val[b * B * T: b * B * T + B * T + 1].astype(np.int64)
    x, y = chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)
    logits = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    tot.append(np.mean(lse - np.take_along_axis(logits, y[..., None], -1)[..., 0]))
ort_val = float(np.mean(tot))
got = vals.get(STEPS, float("nan"))
t.check(abs(got - ort_val) <= 1e-5 * ort_val, f"val loss at step {STEPS}: pipeline {got} vs "
        f"onnxruntime on the exported model {ort_val}")
print(f"val loss at step {STEPS}: pipeline {got}, hetc train {ref_val.get(STEPS)}, "
      f"onnxruntime {ort_val:.9g}", flush=True)

# ---- a run resumed from step 3 (the step-6 checkpoint gone): metrics.jsonl keeps steps 1..3
# of the first run, drops its 4..6 and appends the resumed 4..6 -- every step once
shutil.rmtree(os.path.join(ckpt, "step_%08d" % STEPS), ignore_errors=True)
p = t.launch(out, STEPS, "--checkpoint-dir", ckpt, "--resume")
t.check(p.returncode == 0, f"resumed launch.sh exit {p.returncode}")
again = [json.loads(l) for l in open(mpath)]
t.check([m["step"] for m in again] == list(range(1, STEPS + 1)),
        f"after --resume, metrics.jsonl steps {[m['step'] for m in again]}")
t.check(all("%.9g" % a["loss"] == "%.9g" % b["loss"] for a, b in zip(again, lines)),
        "the resumed steps' losses differ from the first run's")
t.finish()
