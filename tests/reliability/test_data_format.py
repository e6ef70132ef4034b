"""Token-file format is explicit (issue 16 item 13): a file with an
llm.c-sized header but a wrong magic used to be read as headerless nanoGPT
tokens (its header trained as tokens).  The llm.c magic is now required;
headerless files need --data-format raw-u16.  Oracle: the same tokens as an
llm.c file and as raw uint16 (with the flag) train to the same losses.

usage: test_data_format.py HETC SOURCE_DIR
"""
import os
import re
import sys

import numpy as np

import rel_common as rc

HETC, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "examples", "gpt_tiny.onnx")
LLMC = os.path.join(SRC, "examples", "tiny_corpus.bin")
tmp = rc.workdir()

hdr = np.fromfile(LLMC, np.int32, 256)
toks = np.fromfile(LLMC, np.uint16, offset=1024)
rc.check(hdr[0] == 20240520 and hdr[2] == len(toks), "tiny_corpus.bin is not llm.c: %s" % hdr[:3])
raw = os.path.join(tmp, "raw.bin")
toks.tofile(raw)
bad = os.path.join(tmp, "badmagic.bin")
h2 = hdr.copy()
h2[0] = 20240519
with open(bad, "wb") as f:
    f.write(h2.tobytes() + toks.tobytes())


def train(data, *extra):
    return rc.run([HETC, "train", MODEL, "--data", data, "--steps", "3", "--microbatch", "2",
                   "--seq", "16", "--no-checkpoint", *extra])


def losses(p):
    return [float(x) for x in re.findall(r"\| loss (\S+) \|", p.stdout)]


p = train(bad)
rc.check(p.returncode == 1 and "badmagic.bin" in p.stderr and "20240519" in p.stderr
         and "not the magic 20240520" in p.stderr, "wrong magic: rc=%d %s" % (p.returncode, p.stderr[-400:]))
p = train(raw)
rc.check(p.returncode == 1 and "raw.bin" in p.stderr and "--data-format raw-u16" in p.stderr,
         "headerless without the flag: rc=%d %s" % (p.returncode, p.stderr[-400:]))
p = train(LLMC, "--data-format", "raw-u16")
rc.check(p.returncode == 1 and "starts with the llm.c magic" in p.stderr,
         "llm.c file read as raw: rc=%d %s" % (p.returncode, p.stderr[-400:]))
p = train(raw, "--data-format", "zzz")
rc.check(p.returncode != 0 and "--data-format zzz" in p.stderr, "bad format name: %s" % p.stderr[-300:])
a, b = train(LLMC), train(raw, "--data-format", "raw-u16")
la, lb = losses(a), losses(b)
rc.check(a.returncode == 0 and b.returncode == 0 and len(la) == 3 and la == lb,
         "same tokens, two formats: %s vs %s (%s %s)" % (la, lb, a.stderr[-300:], b.stderr[-300:]))
rc.check("raw-u16" in b.stdout, "the run names its format: %s" % b.stdout[:300])
rc.finish()
