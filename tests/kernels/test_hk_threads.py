"""Threaded host kernels: test_hk_threads checks each kernel against its
scalar reference; run it with HETC_THREADS=1, 2 and 3 and require the
dumped outputs to be byte-identical (the chunking never depends on the
thread count); a malformed HETC_THREADS is reported on stderr.

    python3 test_hk_threads.py BUILD/test_hk_threads
"""
import os
import subprocess
import sys
import tempfile


def main():
    exe = sys.argv[1]
    outs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in (1, 2, 3):
            path = os.path.join(tmp, f"out{t}.bin")
            env = dict(os.environ, HETC_THREADS=str(t))
            r = subprocess.run([exe, path], env=env, capture_output=True, text=True)
            if t == 1 or r.returncode:
                print(r.stdout, r.stderr)
            if r.returncode:
                print(f"FAIL: HETC_THREADS={t} exited {r.returncode}")
                return 1
            with open(path, "rb") as f:
                outs[t] = f.read()
    size = len(outs[1])
    for t in (2, 3):
        if outs[t] != outs[1]:
            diff = next(i for i, (a, b) in enumerate(zip(outs[1], outs[t])) if a != b) \
                if len(outs[t]) == size else -1
            print(f"FAIL: HETC_THREADS={t} output differs from 1 thread (byte {diff} of {size})")
            return 1
    # a malformed HETC_THREADS is named on stderr (and the run is still correct)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bad.bin")
        r = subprocess.run([exe, path], env=dict(os.environ, HETC_THREADS="two"),
                           capture_output=True, text=True)
        if r.returncode or "HETC_THREADS='two' is not a whole number" not in r.stderr:
            print(f"FAIL: HETC_THREADS=two: exit {r.returncode}, stderr {r.stderr!r}")
            return 1
        with open(path, "rb") as f:
            if f.read() != outs[1]:
                print("FAIL: HETC_THREADS=two changed the kernels' output")
                return 1
    print(f"OK: {size} bytes of kernel output identical for HETC_THREADS=1,2,3 (and 'two', "
          "which is reported)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
