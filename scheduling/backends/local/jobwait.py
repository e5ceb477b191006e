"""The supervisor's wait loop (`shim.py`): from the moment the job's command runs until
its end is written.

Imported by path once the child is running (like `jobwatch.py`), so the modules it needs
cost nothing before the command starts; the launcher imports it once for every job.
"""

from __future__ import annotations

import _signal  # the built-in module: `signal` would import enum
import os
import time

import shim as supervisor  # beside this file: the supervisor that imported this module

# How often the wait loop wakes to look for the cancel marker when nothing else happens: a
# cancel reaches the job (SIGTERM, then SIGKILL after the grace period) within this.
MARKER_POLL_S = 0.25
# The last line of a multi-node job whose rank failed (the rank runner's, ranks.py).
RANK_FAILED = "switchyard: rank "


def wait(shim, pid: int, out_r: int, jobwatch) -> None:
    """Wait for the job to end, copying its output, enforcing its walltime, limits and a
    cancel; then write how it ended."""
    # Only now the heavier modules: the child already runs.
    import select

    plan = shim.plan
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)

    def on_signal(signo: int, _frame: object) -> None:
        shim.terminated_by = signo  # the wakeup fd interrupts the select

    for signo in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(signo, on_signal)

    walltime = plan.get("walltime_s")
    grace = float(plan.get("grace_s", supervisor.DEFAULT_GRACE_S))
    start = time.monotonic()
    deadline = start + walltime if walltime else None
    sandbox_pid = shim.sandbox[0] if shim.sandbox else None
    over_limit = None
    if shim.cgroups:
        folders, cgroup = shim.cgroups, supervisor._cgroup()
        over_limit = lambda: cgroup.over_limit(folders)  # noqa: E731
    limits = jobwatch.Limits(plan.get("limits") or {}, pid, start, sandbox_pid, over_limit)
    shim.watch = limits
    gpus = gpu_sampler(plan.get("gpu_watch"), start)
    kill_at: float | None = None  # when SIGKILL follows the SIGTERM already sent
    why: str | None = None  # "timeout" | "cancelled" | "terminated" | "limit"
    broken = ""  # the limit a job broke, in words
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # old kernel: fall back to short polls

    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        now = time.monotonic()
        if plan.get("warm") and take_claim(shim):
            # A warm sandbox handed to a session: its walltime runs from the claim.
            walltime = plan.get("walltime_s")
            deadline = (
                now + walltime - max(0.0, time.time() - shim.claimed_at) if walltime else None
            )
        if why is None:
            if shim.cancelled():
                why = "cancelled"
            elif shim.terminated_by is not None:
                why = "terminated"
            elif deadline is not None and now >= deadline:
                why = "timeout"
            elif broken := (limits.check(now) or ""):
                why = "limit"
            elif gpus is not None and not gpus.due(now):
                gpus.sample(jobwatch.process_tree(pid), now)
            if why == "limit":  # no grace: the limit is already broken
                shim.kill_sandbox()
                signal_group(pid, _signal.SIGKILL)
            elif why is not None:
                term_job(shim, pid, jobwatch, _signal.SIGTERM)
                kill_at = now + grace
        elif kill_at is not None and now >= kill_at:
            shim.kill_sandbox()
            signal_group(pid, _signal.SIGKILL)
            kill_at = None
        timeouts = [MARKER_POLL_S if pidfd is not None else 0.05]
        if why is None:
            timeouts.append(limits.due(now))
            if gpus is not None:
                timeouts.append(gpus.due(now))
            if deadline is not None:
                timeouts.append(deadline - now)
        if kill_at is not None:
            timeouts.append(kill_at - now)
        fds = [wake_r] + ([pidfd] if pidfd is not None else []) + ([out_r] if out_r >= 0 else [])
        try:
            ready, _, _ = select.select(fds, [], [], max(0.0, min(timeouts)))
        except InterruptedError:
            continue
        if wake_r in ready:
            try:  # noqa: SIM105 (contextlib is an import this file avoids)
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
        if out_r >= 0 and out_r in ready:
            out_r = pump(shim, out_r)

    if why is None and over_limit is not None and over_limit():
        # The kernel killed its main process for its memory limit before the watchdog looked.
        limits.next_watch = 0.0
        why, broken = "limit", limits.check(time.monotonic()) or ""
    # Whatever is left of the job's process group (background children) goes with it:
    # a finished job leaves no processes behind.
    signal_group(pid, _signal.SIGKILL)
    shim.kill_sandbox()
    if shim.net is not None:
        supervisor._jobnet().disconnect(shim.net)
        shim.net = None
    # The writers are gone: what is left in the pipe is the end of the output.
    end = time.monotonic() + 2
    while out_r >= 0 and time.monotonic() < end:
        if select.select([out_r], [], [], 0.2)[0]:
            out_r = pump(shim, out_r)
    if out_r >= 0:
        os.close(out_r)
    shim.log.close()
    if gpus is not None:  # written with its end, beside its CPU time (usage.py)
        shim.state["gpu"] = gpus.summary()
    code = 128 - rc if rc < 0 else rc  # shell convention: death by signal N is 128 + N

    if why == "cancelled" or (why is None and shim.cancelled()):
        shim.finish("cancelled", "cancelled", exit_code=code)
    elif why == "timeout":
        shim.finish("timeout", f"walltime of {walltime} s exceeded: stopped", exit_code=code)
    elif why == "limit":
        shim.finish("failed", broken, exit_code=code)
    elif why == "terminated":
        name = signal_name(shim.terminated_by)
        shim.finish(
            "failed", f"the local supervisor was stopped by {name}: job killed", exit_code=code
        )
    elif rc == 0:
        shim.finish("succeeded", "", exit_code=0)
    elif shim.log.last_line().startswith(RANK_FAILED):
        # A multi-node job's runner stopped its other ranks (ranks.py) and says which failed.
        shim.finish("failed", shim.log.last_line().removeprefix("switchyard: "), exit_code=code)
    elif code in (126, 127) and b"prlimit: failed to execute " in shim.log.tail:
        # The sandbox ran, the command in it could not be started.
        why_not = shim.log.last_line().removeprefix("prlimit: failed to execute ")
        shim.finish("failed", f"could not start the command: {why_not}", exit_code=code)
    elif code == 1 and shim.log.last_line().startswith("bwrap: "):
        message = shim.log.last_line().removeprefix("bwrap: ")
        shim.finish("failed", f"the sandbox could not be set up: {message}", exit_code=1)
    elif code == 128 + _signal.SIGXFSZ:
        cap = (plan.get("limits") or {}).get("disk_bytes") or 0
        shim.finish(
            "failed",
            f"disk limit: a file reached {jobwatch.size_text(cap)}, the most a job may "
            "keep here (killed by SIGXFSZ)",
            exit_code=code,
        )
    elif rc < 0 or 128 < code < 128 + 65:
        # The sandbox reports its command's death by signal N as exit code 128 + N.
        signo = code - 128
        name = signal_name(signo)
        shim.finish("failed", f"killed by signal {name} ({signo})", exit_code=code)
    else:
        shim.finish("failed", f"exit code {rc}", exit_code=code)


def gpu_sampler(watch: dict | None, now: float):
    """A GPU job's sampler (gpuwatch.py, beside the backends), or None."""
    if not watch:
        return None
    return supervisor._beside("gpuwatch", "..").GpuSampler(watch["smi"], watch["every_s"], now)


def take_claim(shim) -> bool:
    """A warm sandbox (local/warm.py) handed to a session: the backend wrote the session's
    state (running since the claim) and `claimed` in this folder, saying where the session's
    folder is. From here on this supervisor writes that state, looks for the cancel marker
    there, and ends the sandbox at the session's walltime."""
    import marshal

    try:
        with open(os.path.join(shim.jobdir, "claimed"), "rb") as f:
            claim = marshal.load(f)
    except FileNotFoundError:
        return False
    shim.plan["warm"] = False
    shim.plan["walltime_s"] = claim["walltime_s"]
    shim.claimed_at = claim["claimed_at"]
    shim.warm_state_path = shim.state_path  # told the end too, so that it is cleared then
    # A cancel of the warm sandbox's own key now ends the session it became (backend.py).
    shim.update_state(claimed_by=os.path.basename(claim["jobdir"]))
    shim.jobdir = claim["jobdir"]
    shim.state_path = os.path.join(shim.jobdir, "state.json")
    shim.marker_path = os.path.join(shim.jobdir, "cancel")
    shim.state = dict(claim["state"])
    shim.update_state()
    if os.path.exists(os.path.join(os.path.dirname(shim.warm_state_path), "cancel")):
        # Cancelled by the warm sandbox's own key before this: the session it became ends.
        with open(shim.marker_path, "a"):
            pass
    return True


def term_job(shim, pid: int, jobwatch, signo: int) -> None:
    """Ask the job's own processes to stop (a grace period follows, then SIGKILL).

    They run in a session of their own under the sandbox's init, which takes no signal
    it has no handler for: each of them is signalled by its host pid.
    """
    if shim.sandbox is None or supervisor.proc_start_time(shim.sandbox[0]) != shim.sandbox[1]:
        signal_group(pid, signo)  # no sandbox (yet): its setup is what runs
        return
    for job_pid in jobwatch.process_tree(shim.sandbox[0])[1:]:
        try:  # noqa: SIM105 (contextlib is an import this file avoids)
            os.kill(job_pid, signo)
        except (ProcessLookupError, PermissionError):
            pass


def pump(shim, out_r: int) -> int:
    """Copy what the job printed into the log; -1 once the pipe is closed."""
    data = os.read(out_r, 1 << 16)
    if not data:
        os.close(out_r)
        return -1
    shim.log.feed(data)
    return out_r


def signal_name(signo: int) -> str:
    """SIGKILL for 9: imports `signal` (and enum, ~6 ms) only for a job that ended so."""
    import signal

    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


def signal_group(pgid: int, signo: int) -> None:
    # pgid is the child's pid: the kernel does not reuse a pid while a process group of that
    # id has members, so this never hits an unrelated group.
    try:  # noqa: SIM105 (contextlib is an import this file avoids)
        os.killpg(pgid, signo)
    except (ProcessLookupError, PermissionError):
        pass
