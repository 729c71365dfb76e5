"""A real Slurm cluster of three nodes on this machine, for the tests of the gate's batch jobs.

Debian 12's ``slurmctld``, ``slurmd`` and ``slurm-client`` (22.05) with ``munge``, started as root
with every file under one temporary folder: munge's key, socket, pid and log; ``slurm.conf``;
the controller's state and each node's spool. Debian's Slurm is built with multiple-slurmd
support, so ``NodeName=n[1-3] NodeHostname=localhost Port=...`` and one ``slurmd -N nX`` per node
give three nodes on one machine. The daemons run in the foreground (``-D``, ``-F``) as children of
the test process, so each is stopped by its own PID at the end.

Per-node differences (a broken compiler on one node, a GPU-less node) come from the nodes' own
environment files: slurm.conf's ``TaskProlog`` reads ``<root>/node-env/<node>.env`` on the node
the task starts on and prints its lines as ``export NAME=value``, so every task (the batch script
and each ``srun`` step) on that node gets them; :meth:`SlurmCluster.set_node_env` writes one.

:func:`unavailable` says in one line why the cluster cannot start here (not root, not
Debian/Ubuntu, packages missing); the tests skip with that line.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

NODES = ("n1", "n2", "n3")
#: CPUs each node claims (SlurmdParameters=config_overrides lets a node claim more than it has).
NODE_CPUS = 2
PARTITION = "debug"
PACKAGES = "slurmctld slurmd slurm-client munge"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "srun")
#: Seconds a cluster may take to bring its nodes up.
START_TIMEOUT = 30

_SLURM_CONF = """\
ClusterName=rosenna-test
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={root}/task-prolog
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
InactiveLimit=0
KillWait=2
SlurmctldTimeout=10
SlurmdTimeout=30
MessageTimeout=10
SlurmctldDebug=info
SlurmdDebug=info
{nodes}
PartitionName={partition} Nodes={node_range} Default=YES MaxTime=INFINITE State=UP
"""

# Runs on the node before each task, as the job's user: its `export NAME=value` lines reach the task.
_TASK_PROLOG = """\
#!/bin/sh
f="{root}/node-env/$SLURMD_NODENAME.env"
[ -r "$f" ] || exit 0
while IFS= read -r line; do
    case "$line" in PATH_PREPEND=*) echo "export PATH=${{line#PATH_PREPEND=}}:$PATH";; ?*=*) echo "export $line";; esac
done < "$f"
"""


def unavailable():
    """Why a cluster cannot start on this machine, in one line; "" when it can."""
    if os.geteuid() != 0:
        return "a Slurm cluster needs root (munged and slurmd run as root): run the suite as root"
    try:
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    except OSError:
        release = {}
    family = f"{release.get('ID', '')} {release.get('ID_LIKE', '')}".replace('"', "").split()
    if not {"debian", "ubuntu"} & set(family):
        return "a Slurm cluster is set up only on Debian or Ubuntu (the slurm-wlm packages)"
    missing = [cmd for cmd in DAEMONS if not shutil.which(cmd)]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found): "
                f"apt-get install {PACKAGES} (.ci/system-deps.sh does)")
    return ""


def _free_ports(count):
    """``count`` TCP ports free now, consecutive where possible."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class SlurmCluster:
    """Three Slurm nodes and a controller under ``root``; :meth:`start`, :meth:`reset`, :meth:`stop`."""

    def __init__(self, root):
        self.root = Path(root)
        self.procs = {}  # name -> Popen of a daemon started here
        self.conf = self.root / "slurm.conf"
        self.env = None

    # -- starting and stopping ----------------------------------------------------------------

    def start(self):
        root = self.root
        for sub in ("munge", "state", "run", "log", "node-env", *(f"spool/{n}" for n in NODES)):
            (root / sub).mkdir(parents=True, exist_ok=True)
        # Non-root jobs exec their script from the spool; munge wants its socket folder 0755.
        for path in (root, root / "spool", *(root / "spool" / n for n in NODES), root / "munge"):
            path.chmod(0o755)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = root / "munge" / "munge.socket"
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={socket_path}", f"--key-file={key}",
                               f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/log/munged.log",
                               f"--seed-file={root}/munge/munged.seed"])
        self._wait(lambda: socket_path.exists(), "munged's socket")
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs={NODE_CPUS} State=UNKNOWN"
            for n, p in zip(NODES, node_ports))
        self.conf.write_text(_SLURM_CONF.format(
            ctld_port=ctld_port, munge_socket=socket_path, root=root, nodes=nodes, partition=PARTITION,
            node_range=",".join(NODES)))
        prolog = root / "task-prolog"
        prolog.write_text(_TASK_PROLOG.format(root=root))
        prolog.chmod(0o755)
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for n in NODES:
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(self.conf)])
        self._wait(lambda: self.idle_nodes() == set(NODES), "three idle nodes")
        return self

    def _spawn(self, name, argv):
        log = open(self.root / "log" / f"{name}.stdout", "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=dict(os.environ, SLURM_CONF=str(self.conf)))
        log.close()

    def _wait(self, ready, what, timeout=START_TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}: "
                                       f"{self._log_tail(name)}")
            if ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"no {what} after {timeout} s: {self._log_tail('slurmctld')}")

    def _log_tail(self, name, lines=5):
        """The last lines of a daemon's log, for a message."""
        logs = [self.root / "log" / f"{name}.stdout", self.root / "log" / f"{name}.log"]
        text = "".join(p.read_text(errors="replace") for p in logs if p.exists()).strip().splitlines()
        return f"last lines of its log ({self.root / 'log'}): " + " | ".join(text[-lines:]) if text else \
            f"see {self.root / 'log'}"

    def stop(self):
        """Stop every daemon started here by its PID: slurmd's first, then slurmctld, then munged."""
        order = [n for n in self.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]
        if self.env is not None and "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--quiet", "--user=root"], env=self.env, capture_output=True,
                           timeout=10)
        for name in order:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()

    def pids(self):
        return {name: proc.pid for name, proc in self.procs.items()}

    # -- between tests ------------------------------------------------------------------------

    def reset(self):
        """A clean cluster for the next test: no job queued or running, every node idle, no node env."""
        self.run("scancel", "--full", "--quiet", "--user=root", check=False)
        self._wait(lambda: not self.run("squeue", "-h", "-o", "%i", "-t", "all", check=False).stdout.strip()
                   or self._none_active(), "an empty queue")
        self.run("scontrol", "update", f"NodeName={','.join(NODES)}", "State=RESUME", check=False)
        for f in (self.root / "node-env").iterdir():
            f.unlink()
        self._wait(lambda: self.idle_nodes() == set(NODES), "three idle nodes")

    def _none_active(self):
        states = self.run("squeue", "-h", "-o", "%T", check=False).stdout.split()
        return not [s for s in states if s in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")]

    # -- using it ------------------------------------------------------------------------------

    def run(self, *argv, check=True, env=None, timeout=60, **kw):
        result = subprocess.run(list(argv), env=dict(self.env, **(env or {})), capture_output=True, text=True,
                                timeout=timeout, **kw)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def idle_nodes(self):
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        return {line.split()[0] for line in out if line.strip() and line.split()[1] == "idle"}

    def set_node_env(self, node, **values):
        """Give every task on ``node`` these variables (``PATH_PREPEND=dir`` puts dir first on PATH)."""
        (self.root / "node-env" / f"{node}.env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def job(self, job_id):
        """``scontrol show job``'s fields of one job (the first record: an array's first task)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id), check=False).stdout
        fields = {}
        for word in out.splitlines()[0].split() if out.strip() else ():
            key, _, value = word.partition("=")
            fields.setdefault(key, value)
        return fields

    def jobs(self, job_id):
        """Every record of a job (an array gives one per task): a list of field dicts."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id), check=False).stdout
        return [dict(w.partition("=")[::2] for w in line.split()) for line in out.splitlines() if line.strip()]

    def wait(self, job_id, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"),
             timeout=120):
        """Wait until every record of ``job_id`` is in one of ``states``; return the records."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = self.jobs(job_id)
            if records and all(r.get("JobState") in states for r in records):
                return records
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not in {states} after {timeout} s: {self.jobs(job_id)}")


def leftover_processes(pids):
    """Those of ``pids`` still alive (a zombie counts as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def stray_steps(conf):
    """Slurm and munge processes of the cluster with this ``conf`` still alive: daemons and slurmstepd's.

    Every process the cluster started carries ``SLURM_CONF=<conf>`` in its environment (the daemons
    are started with it, and a slurmstepd inherits its slurmd's).
    """
    marker = f"SLURM_CONF={conf}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if comm not in ("munged", "slurmctld", "slurmd", "slurmstepd"):
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0") and pid_alive(int(entry.name)):
                found.append(f"{comm} {entry.name}")
        except OSError:
            continue
    return found


def pid_alive(pid):
    return bool(leftover_processes([pid]))
