"""Checkpoint format 3: standard FNV-1a 64 checksums, older formats still read.

- A checkpoint written by the runtime (ckpt_tool write) is format 3 and its
  header, tensor and MANIFEST checksums are the FNV-1a 64 that this script
  computes itself (checked first against the published FNV-1a 64 test
  vectors), with the layout of docs/RUNTIME.md parsed here byte by byte.
- data/ckpt_v2 was written by the runtime of commit 246d496 (format 2,
  whose checksums started from 1469598103934665603, the offset basis with a
  digit lost): it still verifies, is found by `latest` and reads.  It was
  made by a program linked against that runtime calling
  rt_ckpt_write_layer_run(dir, step 3, run 0x1234abcd5678ef01, layer 0,
  {"w": f32[4] = 1.5 -2 3.25 0, "step": i64 scalar = 7}) and
  rt_ckpt_write_manifest_run(dir, 3, same run, 1 layer).
- The format version picks the basis: a format-3 file re-stamped as 2 (or a
  format-2 file as 3) fails its header checksum, while a file re-encoded as
  format 2 with the old basis reads.

usage: test_ckpt_format.py CKPT_TOOL FIXTURE_DIR WORKDIR
"""
import os
import shutil
import struct
import subprocess
import sys

tool, fixture, work = sys.argv[1:4]
fails = 0
MASK = (1 << 64) - 1
BASIS = 14695981039346656037
OLD_BASIS = 1469598103934665603


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg)
    return cond


def fnv1a64(b, h=BASIS):
    for c in b:
        h = ((h ^ c) * 1099511628211) & MASK
    return h


# the published FNV-1a 64 test vectors (isthe.com/chongo/tech/comp/fnv)
for s, want in ((b"", 0xcbf29ce484222325), (b"a", 0xaf63dc4c8601ec8c),
                (b"foobar", 0x85944171f73967e8)):
    check(fnv1a64(s) == want, f"this script's FNV-1a 64 of {s!r}")


def tool_run(*args):
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip()


def parse_layer(b):
    """The docs/RUNTIME.md layout: (version, header bytes, tensors)."""
    magic, ver, layer, step, nt, hdr, fbytes = struct.unpack_from("<8sIIqIIQ", b, 0)
    check(magic == b"HETCKPT\0", "magic")
    check(fbytes == len(b), f"file bytes {fbytes} vs {len(b)}")
    pos = 40 + (8 if ver >= 2 else 0)
    tensors = []
    for _ in range(nt):
        (nl,) = struct.unpack_from("<I", b, pos)
        name = b[pos + 4:pos + 4 + nl].decode()
        pos += 4 + nl
        dt, nd = struct.unpack_from("<II", b, pos)
        pos += 8
        shape = struct.unpack_from(f"<{nd}q", b, pos)
        pos += 8 * nd
        off, nb, sum_ = struct.unpack_from("<QQQ", b, pos)
        pos += 24
        tensors.append((name, dt, shape, off, nb, sum_))
    check(pos + 8 == hdr, f"header entries end at {pos} + 8, header bytes {hdr}")
    return ver, hdr, tensors


def restamp(b, ver, basis):
    """b with format version `ver` and every checksum recomputed from basis."""
    b = bytearray(b)
    struct.pack_into("<I", b, 8, ver)
    _, hdr, tensors = parse_layer(bytes(b))
    pos = 48
    for name, dt, shape, off, nb, _ in tensors:
        pos += 4 + len(name) + 8 + 8 * len(shape) + 16
        struct.pack_into("<Q", b, pos, fnv1a64(b[off:off + nb], basis))
        pos += 8
    struct.pack_into("<Q", b, hdr - 8, fnv1a64(b[:hdr - 8], basis))
    return bytes(b)


def manifest_sum_ok(text, basis):
    at = text.index("checksum ")
    return int(text[at + 9:].strip(), 16) == fnv1a64(text[:at].encode(), basis)


if os.path.isdir(work):
    shutil.rmtree(work)
os.makedirs(work)

# 1. written now: format 3, standard FNV-1a 64 everywhere
new = os.path.join(work, "new")
rc, out = tool_run("write", new, "5")
check(rc == 0 and out == "ok", f"ckpt_tool write: {rc} {out}")
sdir = os.path.join(new, "step_00000005")
with open(os.path.join(sdir, "layer_00000.bin"), "rb") as f:
    lb = f.read()
ver, hdr, tensors = parse_layer(lb)
check(ver == 3, f"format version {ver}, expected 3")
(hsum,) = struct.unpack_from("<Q", lb, hdr - 8)
check(hsum == fnv1a64(lb[:hdr - 8]), "header checksum is not FNV-1a 64 of the header")
check(len(tensors) == 1 and tensors[0][0] == "w", f"tensors {tensors}")
for name, dt, shape, off, nb, s in tensors:
    data = lb[off:off + nb]
    check(struct.unpack("<4f", data) == (1, 2, 3, 4), f"'{name}' data")
    check(s == fnv1a64(data), f"'{name}': checksum {s:016x}, FNV-1a 64 {fnv1a64(data):016x}")
with open(os.path.join(sdir, "MANIFEST")) as f:
    man = f.read()
check(man.startswith("hetrt-checkpoint 3\n"), f"MANIFEST head: {man.splitlines()[0]}")
check(manifest_sum_ok(man, BASIS), "MANIFEST checksum is not FNV-1a 64 of what precedes it")
check(tool_run("latest", new) == (0, "step 5"), "latest of the new checkpoint")
check(tool_run("read", sdir, "0") == (0, "ok"), "read of the new layer")

# 2. written by the pre-fix runtime (format 2, old basis): still reads
old = os.path.join(work, "old")
shutil.copytree(fixture, old)
odir = os.path.join(old, "step_00000003")
with open(os.path.join(odir, "layer_00000.bin"), "rb") as f:
    ob = f.read()
over, ohdr, otensors = parse_layer(ob)
(osum,) = struct.unpack_from("<Q", ob, ohdr - 8)
check([(n, d, s) for n, d, s, *_ in otensors] == [("w", 1, (4,)), ("step", 4, ())],
      f"fixture tensors {otensors}")
check(struct.unpack("<4f", ob[otensors[0][3]:otensors[0][3] + 16]) == (1.5, -2, 3.25, 0) and
      struct.unpack("<q", ob[otensors[1][3]:otensors[1][3] + 8]) == (7,), "fixture data")
check(over == 2 and osum == fnv1a64(ob[:ohdr - 8], OLD_BASIS) and osum != fnv1a64(ob[:ohdr - 8]),
      "the fixture is format 2 with old-basis checksums")
with open(os.path.join(odir, "MANIFEST")) as f:
    oman = f.read()
check(oman.startswith("hetrt-checkpoint 2\n") and manifest_sum_ok(oman, OLD_BASIS),
      "the fixture's MANIFEST is format 2 with an old-basis checksum")
check(tool_run("latest", old) == (0, "step 3"), f"latest of the format-2 checkpoint: "
      f"{tool_run('latest', old)}")
check(tool_run("read", odir, "0") == (0, "ok"), f"read of the format-2 layer: "
      f"{tool_run('read', odir, '0')}")

# 3. the version picks the basis
cases = (("v3 stamped 2", lb, 2, None, False), ("v2 stamped 3", ob, 3, None, False),
         ("v3 re-encoded as 2", lb, 2, OLD_BASIS, True),
         ("v3 with old-basis sums", lb, 3, OLD_BASIS, False))
for tag, src, ver, basis, ok in cases:
    d = os.path.join(work, tag.replace(" ", "_"))
    os.makedirs(d)
    if basis is None:
        b = bytearray(src)
        struct.pack_into("<I", b, 8, ver)
        b = bytes(b)
    else:
        b = restamp(src, ver, basis)
    with open(os.path.join(d, "layer_00000.bin"), "wb") as f:
        f.write(b)
    rc, out = tool_run("read", d, "0")
    if ok:
        check(rc == 0 and out == "ok", f"{tag}: {rc} {out}")
    else:
        check(rc == 1 and "header checksum mismatch" in out, f"{tag}: {rc} {out}")

print("checkpoint format: FNV-1a 64 as published; format 2 still reads" if not fails
      else f"{fails} failures")
sys.exit(1 if fails else 0)
