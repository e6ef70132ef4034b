"""Multi-node mpirun for real (issue 19): launch.sh --hostfile over three "hosts".

The compiled 3-stage example (gpt_tiny on tiny_hetero.yaml: stage_0 x1,
stage_1 x2, stage_2 x1) runs from a hostfile naming 127.0.0.2, 127.0.0.3
and 127.0.0.4, one line per mesh as the generated hostfile template.
OpenMPI's rsh launcher is pointed at tests/stages/local_rsh.sh, which runs
what it is given on this machine in a namespace whose host name is the
host's: mpirun starts an orted daemon per host "remotely", the MPI library
sees three nodes (TCP between them, on loopback), as on a real cluster.

Checked: 10 steps' losses equal `hetc train` (1e-5 relative); every rank's
start-up line names the host, local rank and stage the hostfile gives it
(rank -> node -> device binding: ranks fill the hosts' slots in stage
order, local rank counts the ranks before it on its host, the CUDA
backend's GPU); the agent was called for each host.  A broken launch ends
with a message, non-zero, without a hang: a host that refuses the
connection, a host that never answers (bounded by HETC_CONNECT_TIMEOUT_S
inside launch.sh), a stage binary missing on one host, a hostfile with too
few slots.  No daemon (orted) or agent is left running.

usage: test_stages_hosts.py HETC WORKDIR
"""
import os
import re
import sys

from stagetest import SRC, StageTest

STEPS = 10
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
AGENT = os.path.join(SRC, "tests", "stages", "local_rsh.sh")


def ours(marker):
    """pid -> command of the running processes whose environment holds
    marker (the agent's log variable: what this test's launches started)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() not in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                continue
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            out[int(pid)] = stat[stat.index("(") + 1:stat.rindex(")")]
    return out


if os.geteuid() != 0:
    # local_rsh.sh needs unshare (mount + UTS namespaces); CI runs as root
    print("SKIP: needs root for unshare (the stand-in hosts' namespaces)")
    sys.exit(77)

t = StageTest("tiny_hetero.yaml", horizon=STEPS + 5)
check = t.check
out = t.path("build")
p = t.compile(out)
if not check(p.returncode == 0, f"hetc compile exit {p.returncode}"):
    t.finish()
stages = [int(x) for x in re.search(r"^stages=\(([^)]*)\)", open(os.path.join(out, "launch.sh")).read(),
                                    re.M).group(1).split()]
check(stages == [1, 2, 1], f"want stage_0 x1, stage_1 x2, stage_2 x1 (one mesh each): {stages}")
# the generated template's slots, the names replaced by the stand-in hosts
tmpl = [ln.split() for ln in open(os.path.join(out, "hostfile")) if ln.strip() and ln[0] != "#"]
check(len(tmpl) == len(HOSTS), f"hostfile template: {tmpl}")
hostfile = t.path("hostfile")
with open(hostfile, "w") as f:
    for h, line in zip(HOSTS, tmpl):
        f.write(f"{h} {line[1]}\n")
log = t.path("agent.log")
env = dict(os.environ, OMPI_MCA_plm_rsh_agent=AGENT, LOCAL_RSH_LOG=log,
           OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
           HETC_THREADS="1")
env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)  # the hostfile's slots must suffice

ref = t.reference(STEPS + 5)
p = t.launch(out, STEPS, "--hostfile", hostfile, env=env, timeout=600)
got, w = t.expect_losses(p, "3-host run", ref, n=STEPS)
print(f"3 hosts: {len(got)} steps == hetc train to {w:.2g} relative", flush=True)

# rank -> host -> local rank, from each rank's start-up line
bind = {int(m.group(1)): m.groups()[1:] for m in re.finditer(
    r"^\[hetrt rank (\d+)\] stage (\d+) dp \S+ tp \S+ on host (\S+): local rank (\d+) of (\d+), "
    r"mpirun local rank (\d+); CUDA_VISIBLE_DEVICES=\S+; device (.*)$", p.stderr, re.M)}
check(sorted(bind) == list(range(sum(stages))), f"a start-up line per rank: {sorted(bind)}")
want, rank = {}, 0
for h, line in zip(HOSTS, tmpl):  # slots filled in stage order, host by host
    n = int(line[1].split("=")[1])
    for k in range(n):
        want[rank] = (h, k, n)
        rank += 1
rank_stage = [s for s, d in enumerate(stages) for _ in range(d)]
for r, (stage, host, local, nlocal, ompi_local, dev) in sorted(bind.items()):
    h, k, n = want.get(r, ("?", -1, -1))
    check((int(stage), host, int(local), int(nlocal)) == (rank_stage[r], h, k, n),
          f"rank {r}: stage {stage} host {host} local rank {local}/{nlocal}, "
          f"want stage {rank_stage[r]} host {h} local rank {k}/{n}")
    check(int(ompi_local) == int(local), f"rank {r}: mpirun's local rank {ompi_local} != {local}")
    check(dev.startswith("host CPU"), f"rank {r}: device {dev}")
print("binding:", "; ".join(f"rank {r} -> {b[1]} local {b[2]}/{b[3]} (stage {b[0]})"
                             for r, b in sorted(bind.items())), flush=True)
called = [ln.split()[0] for ln in open(log) if " orted " in f" {ln} "] if os.path.exists(log) else []
check(sorted(set(called)) == HOSTS, f"orted started through the agent on every host: {called}")

# broken launches: a message naming what is wrong, non-zero, no hang
def broken(label, expect, extra_env, hf=hostfile):
    e = dict(env, **extra_env)
    r = t.launch(out, 2, "--hostfile", hf, env=e, timeout=300, quiet=True)
    ok = r.returncode != 0 and all(re.search(x, r.stderr) for x in expect)
    check(ok, f"{label}: exit {r.returncode}, want {expect} in: {r.stderr[-600:]}")
    print(f"{label}: exit {r.returncode}:", " | ".join(
        ln for ln in r.stderr.splitlines() if ln.startswith("launch.sh")), flush=True)
    check("step " not in r.stdout, f"{label}: the job ran: {r.stdout[-300:]}")


broken("refused host", [r"host 127\.0\.0\.3 .*cannot be reached", "Connection refused"],
       {"LOCAL_RSH_DOWN": "127.0.0.3"})
broken("silent host", [r"host 127\.0\.0\.4 .*cannot be reached.*no answer within 3 s"],
       {"LOCAL_RSH_HANG": "127.0.0.4", "HETC_CONNECT_TIMEOUT_S": "3"})
stage1 = os.path.join(out, "stage_1")
broken("stage_1 missing on one host",
       [r"node 127\.0\.0\.3: stage binary " + re.escape(stage1) + " is missing or not executable"],
       {"LOCAL_RSH_HIDE": f"127.0.0.3:{stage1}"})
small = t.path("hostfile_small")
with open(small, "w") as f:
    f.write("# two slots for four ranks\n127.0.0.2 slots=1\n127.0.0.3 slots=1  # a comment\n")
broken("too few slots", [r"has 2 slots, the plan needs 4 ranks \(stage_0 x1 \+ stage_1 x2 \+ stage_2 x1\)"],
       {}, hf=small)

left = ours("LOCAL_RSH_LOG=" + log)
check(not left, f"processes left running: {left}")
t.finish()
