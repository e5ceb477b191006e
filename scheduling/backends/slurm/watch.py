"""What a Slurm job really used, measured from outside its sandbox (docs/console.md).

Inside the sandbox the job's processes are reaped by the sandbox's init, so neither the
batch step's rusage nor Slurm's TotalCPU sees their CPU time. The batch script therefore runs
the sandbox under this small watcher (standard library only, passed to `python3 -c`): it
samples the CPU time of the sandbox's process tree from /proc twice a second, forwards the
signals Slurm sends, and writes the most it saw, in milliseconds, to a file beside the job's
folder, which the sandbox hides from the job (the job cannot write its own figure; a researcher
with a cluster account of their own could, from a shell: the figure only advises, it is never
billed). It runs isolated (`python3 -I -S`, from /), so nothing the job exported or wrote is
imported by it. It then ends as the sandbox did: with its exit code, or killed by the same
signal. A node without python3 runs the sandbox directly, as before, and reports nothing.

A batch job's network is connected by this watcher too, with the very code the local backend's
supervisor runs (jobnet.py, whose source is put in front of the watcher's): the sandbox
waits (--block-fd) until the watcher, as the job's account, has connected it through
slirp4netns with the control plane out of reach. Without python3 a batch job does not run.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from scheduling.backends import gpuwatch, jobnet
from scheduling.backends.devices import SHELL_DEVICES
from scheduling.backends.slurm.imagejob import SHELL_WORDS
from scheduling.decisions.types import GpuUse

_WATCH = r"""
import json, signal, subprocess, sys, time
out, net, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
# A GPU job's GPUs, sampled (gpuwatch.py) where the node has nvidia-smi; the period is the
# watcher's own, never the job's (taken out of the environment before the job starts).
every = float(os.environ.pop("SWITCHYARD_GPU_SAMPLE_S", "") or 10)
smi = find_smi() if os.environ.get("SLURM_JOB_GPUS") else None
gpus = GpuSampler(smi, every, time.monotonic()) if smi else None
tick = 1000 / os.sysconf("SC_CLK_TCK")
handle = None
cmd, keep = prepare(cmd)
if net == NETWORK_ARG_NONE:
    child = subprocess.Popen(cmd, pass_fds=keep)
else:
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    cmd = [cmd[0], "--info-fd", str(info_w), "--block-fd", str(block_r), *cmd[1:]]
    child = subprocess.Popen(cmd, pass_fds=(info_w, block_r, *keep))
    os.close(info_w)
    os.close(block_r)
    with os.fdopen(info_r, "rb") as f:
        info = f.read()
    if not info:  # bwrap failed to set up, and says why
        os.close(block_w)
    else:
        try:
            box = json.loads(info)["child-pid"]
            handle = release(box, block_w, {"blocked": [n for n in net.split(",") if n]})
        except NetworkError as exc:
            print("switchyard: the job's network could not be set up:", exc, file=sys.stderr)
            child.wait()  # bwrap, whose sandbox was killed
            sys.exit(1)
for fd in keep:
    os.close(fd)  # the sandbox's now: its end closes them
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, lambda n, f: child.send_signal(n))
def cpu(root, seen):
    todo, ticks = [root], 0
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                ticks += sum(int(v) for v in f.read().rsplit(b")", 1)[1].split()[11:15])
            seen.append(pid)
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return ticks * tick
best = 0
while True:
    try:
        rc = child.wait(timeout=0.5)
        break
    except subprocess.TimeoutExpired:
        tree = []
        best = max(best, cpu(child.pid, tree))
        if gpus is not None and not gpus.due(time.monotonic()):
            gpus.sample(tree, time.monotonic())
if handle is not None:
    disconnect(handle)
finish()
try:
    with open(out, "w") as f:
        f.write("%d\n" % round(best))
        if gpus is not None and gpus.summary():
            f.write(json.dumps(gpus.summary()) + "\n")
except OSError:
    pass
if rc < 0:
    try:
        signal.signal(-rc, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP keep their default anyway
    os.kill(os.getpid(), -rc)
sys.exit(rc)
"""


# What a batch job's watcher adds: nothing. `prepare(cmd)` returns the sandbox's command and
# the descriptors it inherits; `finish()` runs once the sandbox has ended (a live sandbox's
# watcher binds its socket and removes it: slurm/session.py).
_BATCH = """
def prepare(cmd):
    return cmd, ()
def finish():
    pass
"""


def watcher_program(hooks: str = _BATCH) -> str:
    """The watcher's program: jobnet.py's source (whose `from __future__` then holds for the
    whole program), gpuwatch.py's, the hooks, then the watcher's own."""
    gpu = Path(gpuwatch.__file__).read_text(encoding="utf-8")
    gpu = gpu.replace("from __future__ import annotations\n", "")
    return Path(jobnet.__file__).read_text(encoding="utf-8") + gpu + hooks + _WATCH


WATCHER = watcher_program()
NO_PYTHON = (
    "python3 is not installed on this node: a batch job's network cannot be connected, and "
    "a batch job never runs on the host's network"
)


def watched(
    argv: list[str],
    usage_path: str,
    network: list[str] | None = None,
    *,
    program: str = WATCHER,
    args: Sequence[str] = (),
    without_python: str | None = None,
) -> list[str]:
    """Script lines that run `argv` under the watcher (or directly without python3).

    `network` (sandbox.blocked_networks()) has the watcher connect the sandbox's network,
    kept from those networks (batch types); None leaves the job without one. `program` and
    its `args` (before `argv`) are a live sandbox's watcher (slurm/session.py), which cannot
    run without python3 either: `without_python` says why."""
    # The device files' arguments are the script's own array, expanded there (devices.py);
    # so are an image's (imagejob.py).
    shell = {SHELL_DEVICES, *SHELL_WORDS}
    command = " ".join(arg if arg in shell else shlex.quote(arg) for arg in argv)
    net = jobnet.NETWORK_ARG_NONE if network is None else ",".join(network)
    before = "".join(f" {shlex.quote(arg)}" for arg in args)
    every = f"{float(settings.SWITCHYARD_GPU_SAMPLE_S):g}"
    return [
        "if command -v python3 >/dev/null; then",
        # Isolated (-I: no PYTHON* variable, no current folder, no user site) and without
        # site (-S): nothing the job wrote or exported runs here, outside its sandbox.
        f"  cd / && SWITCHYARD_GPU_SAMPLE_S={every} exec python3 -I -S -c {shlex.quote(program)} "
        f"{shlex.quote(usage_path)} "
        f"{shlex.quote(net)}{before} {command}",
        "fi",
        f"echo {shlex.quote('switchyard: ' + (without_python or NO_PYTHON))} >&2; exit 127"
        if network is not None or without_python
        else f"exec {command}",
    ]


def prepare_usage_file(path, uid: int, gid: int) -> None:
    """Beside the job's folder, where the sandbox does not show it: the watcher's file,
    writable by the job's account (the watcher runs as it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    os.chown(path, uid, gid)


def read_usage(usage_path: str) -> int | None:
    """The CPU milliseconds the watcher wrote (its first line), or None."""
    first = _lines(usage_path)[:1]
    return int(first[0]) if first and first[0].isdigit() else None


def read_gpu_use(usage_path: str) -> GpuUse | None:
    """The GPU use the watcher sampled (its second line, JSON), or None: a job without
    GPUs, a node without nvidia-smi, a file the job's account spoiled."""
    second = _lines(usage_path)[1:2]
    try:
        return GpuUse.from_dict(json.loads(second[0])) if second else None
    except ValueError:
        return None


def _lines(usage_path: str) -> list[str]:
    try:
        with open(usage_path) as f:
            return f.read(4096).splitlines()
    except OSError:
        return []
