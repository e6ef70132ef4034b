"""A Slurm cluster of a few nodes on this machine, for the launch tests.

Debian's slurm-wlm daemons (munged, slurmctld, one slurmd per node)
started from a generated slurm.conf in a fresh temporary directory: every
daemon talks over 127.0.0.1 on ports picked free here, nothing of the
system's /etc/slurm or /run/munge is read or written.  Each slurmd runs
with `-N NODE` (Slurm's multiple-slurmd form: one NodeName per daemon,
NodeAddr 127.0.0.1, its own Port) in its own UTS namespace named NODE, so
the tasks of a node see that host name and OpenMPI's shared-memory segments
(named by host) do not collide between nodes; and in its own mount
namespace, where `hide` can make a file absent on that node only.  Each slurmd reads its own
copy of the configuration directory so that its mpi.conf gives the PMIx
plugin a per-node client directory (PMIxCliTmpDirBase: two nodes' steps
would otherwise create the same /tmp/spmix_appdir_UID_JOB.STEP).  No GRES,
CPUs declared per node (SlurmdParameters=config_overrides: more than the
machine has is fine), proctrack/pgid and task/none (no cgroups needed).

    with LocalSlurm(["n1", "n2", "n3"], cpus=2) as sl:
        subprocess.run(["sbatch", ...], env=sl.env)

stop() (the with-block's end, also at interpreter exit and on SIGTERM /
SIGINT) cancels the jobs and stops every daemon it started, by pid:
SIGTERM, then SIGKILL after a grace period.  Needs root (the daemons run as
root, unshare) and the Debian packages of scripts/deps.
"""
import atexit
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing():
    """Why a local Slurm cannot start here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (the Slurm daemons run as root)"
    for exe in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "unshare"):
        if not shutil.which(exe):
            return f"no {exe} (scripts/deps installs slurmctld, slurmd, slurm-client, munge)"
    return None


def free_ports(n):
    """n TCP ports free on 127.0.0.1 now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class LocalSlurm:
    def __init__(self, nodes, cpus, partition="hetc", keep_logs=None, hide=None):
        self.nodes, self.cpus, self.partition = list(nodes), cpus, partition
        # node -> files that node does not have: /dev/null bound over them in its slurmd's
        # mount namespace (a binary missing on one node, for the launch error tests)
        self.hide = hide or {}
        self.keep_logs = keep_logs  # a directory: the daemons' logs are copied there at stop()
        self.dir = tempfile.mkdtemp(prefix="hetc-slurm-")  # short: the munge socket path
        self.procs = {}  # label -> pid of a daemon we started
        self.env = None

    def path(self, *p):
        return os.path.join(self.dir, *p)

    # ------------------------------------------------------------ start
    def start(self, timeout=60):
        self.stepd_before = set(running("slurmstepd"))
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for d in ("state", "spool", "run"):
            os.makedirs(self.path(d))
        with open(self.path("munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge.key"), 0o600)
        self._daemon("munged", ["munged", "--force", "--socket", self.path("munge.sock"),
                                "--key-file", self.path("munge.key"),
                                "--pid-file", self.path("run", "munged.pid"),
                                "--log-file", self.path("munged.log"),
                                "--seed-file", self.path("munged.seed")],
                     self.path("run", "munged.pid"))
        ports = free_ports(2 + len(self.nodes))
        conf = self._conf(ports)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(conf, "slurm.conf"))
        self._daemon("slurmctld", ["slurmctld", "-f", self.env["SLURM_CONF"]],
                     self.path("run", "slurmctld.pid"))
        for n in self.nodes:
            nconf = self.path("etc." + n)  # slurm.conf + this node's mpi.conf
            shutil.copytree(conf, nconf)
            os.makedirs(self.path("pmix", n))
            with open(os.path.join(nconf, "mpi.conf"), "w") as f:
                f.write(f"PMIxCliTmpDirBase={self.path('pmix', n)}\n")
            os.makedirs(self.path("spool", n))
            hide = "".join(f'mount --bind /dev/null {shlex.quote(f)} && ' for f in self.hide.get(n, []))
            self._daemon("slurmd " + n,
                         ["unshare", "--uts", "--mount", "sh", "-c",
                          'hostname "$0" && ' + hide + 'exec slurmd -N "$0" -f "$1"',
                          n, os.path.join(nconf, "slurm.conf")],
                         self.path("run", f"slurmd.{n}.pid"))
        t0 = time.time()
        while time.time() - t0 < timeout:
            p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                               capture_output=True, text=True)
            states = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
            if p.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes):
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm nodes did not come up within {timeout} s: "
                           f"{p.stdout.strip()} {p.stderr.strip()}\n{self.logs()}")

    def _conf(self, ports):
        ctld, slurmd = ports[0], ports[1]
        d = self.path("etc")
        os.makedirs(d)
        lines = [
            "ClusterName=hetctest",
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.path('munge.sock')}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.path('state')}",
            f"SlurmdSpoolDir={self.path('spool')}/%n",
            f"SlurmctldPidFile={self.path('run', 'slurmctld.pid')}",
            f"SlurmdPidFile={self.path('run')}/slurmd.%n.pid",
            f"SlurmctldLogFile={self.path('slurmctld.log')}",
            f"SlurmdLogFile={self.path('slurmd')}.%n.log",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "KillWait=5",
            "MinJobAge=2",
        ]
        for n, port in zip(self.nodes, ports[2:]):
            lines.append(f"NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        with open(os.path.join(d, "slurm.conf"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return d

    def _daemon(self, label, cmd, pidfile, timeout=20):
        """Runs a self-daemonizing daemon and records its pid (from its pid
        file, the daemon's own process)."""
        p = subprocess.run(cmd, env=self.env or os.environ, capture_output=True, text=True,
                           timeout=timeout)
        if p.returncode:
            raise RuntimeError(f"{label} failed to start (exit {p.returncode}): {p.stderr.strip()}"
                               f"\n{self.logs()}")
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                pid = int(open(pidfile).read().split()[0])
                os.kill(pid, 0)
                self.procs[label] = pid
                return
            except (OSError, ValueError, IndexError):
                time.sleep(0.1)
        raise RuntimeError(f"{label}: no live pid in {pidfile} after {timeout} s\n{self.logs()}")

    # ------------------------------------------------------------ use
    def run(self, cmd, timeout=600, **kw):
        return subprocess.run(cmd, env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def logs(self, tail=30):
        out = []
        for f in sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []:
            if f.endswith(".log"):
                lines = open(self.path(f), errors="replace").read().splitlines()[-tail:]
                out.append(f"== {f}\n" + "\n".join(lines))
        return "\n".join(out)

    # ------------------------------------------------------------ stop
    def _on_signal(self, sig, frame):
        self.stop()
        raise SystemExit(128 + sig)

    def stop(self, grace=10):
        """Cancels every job, stops the daemons (slurmd, then slurmctld,
        then munged) and removes the directory.  Idempotent."""
        if not self.procs:
            return
        if self.env and "slurmctld" in self.procs:
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True,
                           timeout=30)
        order = [k for k in self.procs if k.startswith("slurmd")] + \
            [k for k in ("slurmctld", "munged") if k in self.procs]
        for k in order:
            try:
                os.kill(self.procs[k], signal.SIGTERM)
            except OSError:
                pass
        t0 = time.time()
        for k in order:
            while time.time() - t0 < grace and alive(self.procs[k]):
                time.sleep(0.1)
            if alive(self.procs[k]):
                try:
                    os.kill(self.procs[k], signal.SIGKILL)
                except OSError:
                    pass
        # the job steps' slurmstepd outlive slurmd for a moment; ones that hang are killed
        while time.time() - t0 < grace and set(running("slurmstepd")) - self.stepd_before:
            time.sleep(0.1)
        for pid in set(running("slurmstepd")) - self.stepd_before:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.procs = {}
        if self.keep_logs:
            os.makedirs(self.keep_logs, exist_ok=True)
            for f in os.listdir(self.dir):
                if f.endswith(".log"):
                    shutil.copy(self.path(f), os.path.join(self.keep_logs, f))
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def alive(pid):
    """pid runs (a zombie counts as gone)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def running(comm):
    """pids of the live processes named comm."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == comm and alive(int(pid)):
                out.append(int(pid))
        except OSError:
            pass
    return out
