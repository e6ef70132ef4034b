"""The waiting rank reports a clear timeout and the job exits non-zero.

Also: a job launched with more ranks than the layout names is refused
with a message giving both numbers (exit non-zero, no hang).

Usage: test_rt_timeout.py MPIEXEC NPFLAG TIMEOUT_BINARY MPI_TEST_BINARY
"""
import os
import subprocess
import sys

mpiexec, npflag, binary, mpi_binary = sys.argv[1:5]
env = dict(os.environ, HETRT_TIMEOUT_S="2")
# The outer timeout only guards the test suite against a hang; the
# assertions are about the exit status and the message.
p = subprocess.run([mpiexec, npflag, "2", "--oversubscribe", binary], env=env,
                   capture_output=True, text=True, timeout=120)
out = p.stdout + p.stderr
print(out)
assert p.returncode != 0, "job with a rank that never sends exited 0"
assert "[hetrt rank 1]" in out, "the waiting rank is not named"
assert "timed out" in out, "no timeout message"
assert "recv from rank 0" in out, "the peer waited on is not named"
assert "activation of microbatch 3" in out, "the operation is not named"
assert "tag 7" in out, "the tag is not named"

p = subprocess.run([mpiexec, npflag, "3", "--oversubscribe", mpi_binary, "1", "1"], env=env,
                   capture_output=True, text=True, timeout=120)
out = p.stdout + p.stderr
print(out)
assert p.returncode != 0, "a 3-rank job under a 2-rank layout exited 0"
assert "sum to 2 ranks but the job has 3" in out, "layout mismatch not reported"
print("ok")
