"""Usage on Slurm, from its own accounting: `sacct` allocated TRES × elapsed, every run of a
requeued job (docs/accounting.md). A mixin of SlurmBackend: it runs the same commands.

Text output (`-P`, epoch times through SLURM_TIME_FORMAT), like the backend's other sacct
calls; the job name and comment go last, so a '|' in someone else's cannot shift the other
columns (and such a job's comment then does not name this portal: it is left out).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from scheduling.backends.base import Run
from scheduling.backends.slurm.watch import read_gpu_use, read_usage

FORMAT = "--format=JobIDRaw,State,ElapsedRaw,AllocTRES,Start,End,JobName,Comment"
# A run still going (or waiting to go again) is not accounted yet.
UNFINISHED = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD")
# The portal's job names are attempt keys.
PORTAL_KEY = re.compile(r"^sy-[a-z0-9-]{1,60}$")
_MEMORY_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


class SlurmUsage:
    run: Callable[..., str]  # the CommandRunner of the backend
    sacct_window_days: int
    usage_path: Callable[[str], Path]  # key → the watcher's file (SlurmBackend.usage_path)

    def usage(self, backend_ids: list[str]) -> dict[str, list[Run]]:
        """Every run of each finished job; jobs still running (or a final run Slurm has not
        recorded yet) are left out, and asked for again later."""
        wanted = {}
        for backend_id in backend_ids:
            job_id, _, key = backend_id.partition(":")
            if job_id.isdigit():
                wanted[job_id] = (backend_id, key)
        if not wanted:
            return {}
        rows = self._sacct_usage(
            ["-D", f"--starttime=now-{self.sacct_window_days}days", "--jobs=" + ",".join(wanted)]
        )
        by_job: dict[str, list[tuple[str, Run]]] = {}
        for state, run in rows:
            backend_id, key = wanted.get(run.job_id, ("", ""))
            if backend_id and (not key or run.key == key):
                by_job.setdefault(backend_id, []).append((state, run))
        found = {}
        for backend_id, runs in by_job.items():
            runs.sort(key=lambda sr: sr[1].started_at or sr[1].ended_at or _EPOCH)
            if runs[-1][0] in UNFINISHED or any(run.ended_at is None for _, run in runs):
                # Still going, or its end not yet in slurmdbd (it was down when the job
                # ended: slurmctld sends it later, and the elapsed time is not final).
                continue
            found[backend_id] = [run for _, run in runs]
        if found:
            self._add_cpu_time(found)
        return found

    def _add_cpu_time(self, found: dict[str, list[Run]]) -> None:
        """The CPU time of each job's last run: the watcher's figure (watch.py), or Slurm's
        TotalCPU (aggregated on the job's own line, which `-X` leaves out) when that is more;
        and its GPU use, as the watcher sampled it. A requeued job's earlier runs keep none."""
        jobs = {runs[-1].job_id: backend_id for backend_id, runs in found.items()}
        paths = {b: str(self.usage_path(b.partition(":")[2])) for b in found}
        watched = {backend_id: read_usage(path) for backend_id, path in paths.items()}
        out = self.run(
            ["sacct", "-P", "-n", "--format=JobIDRaw,JobID,TotalCPU", "--jobs=" + ",".join(jobs)]
        )
        totals = {}
        for line in out.splitlines():
            raw, job, total = (line.split("|") + ["", "", ""])[:3]
            if raw == job and raw in jobs:
                totals[jobs[raw]] = parse_cpu_time(total)
        for backend_id, runs in found.items():
            figures = [v for v in (watched[backend_id], totals.get(backend_id)) if v is not None]
            if figures:
                runs[-1] = dataclasses.replace(runs[-1], cpu_ms=max(figures))
            gpu = read_gpu_use(paths[backend_id])  # what the watcher sampled of its GPUs
            if gpu is not None:
                runs[-1] = dataclasses.replace(runs[-1], gpu=gpu)

    def accounted(self, start: datetime, end: datetime) -> list[Run]:
        """The runs of this portal's jobs (names that are attempt keys) that ended in the
        window, as slurmdbd has them."""
        rows = self._sacct_usage(
            [
                "-D",
                f"--starttime={_slurm_time(start)}",
                f"--endtime={_slurm_time(end)}",
            ]
        )
        return [
            run
            for state, run in rows
            if state not in UNFINISHED
            and PORTAL_KEY.match(run.key)
            and run.ended_at is not None
            and start <= run.ended_at < end
        ]

    def _sacct_usage(self, options: Sequence[str]) -> list[tuple[str, Run]]:
        out = self.run(["sacct", "-X", "-P", "-n", FORMAT, *options])
        rows = []
        for line in out.splitlines():
            fields = line.split("|", 7)
            if len(fields) != 8 or not fields[0].isdigit():
                continue
            job_id, state, elapsed, tres, started, ended, name, comment = fields
            alloc = parse_tres(tres)
            rows.append(
                (
                    state.split()[0] if state else "",
                    Run(
                        job_id=job_id,
                        key=name,
                        cpus=alloc.get("cpu", 0),
                        gpus=alloc.get("gres/gpu", 0),
                        memory_mib=alloc.get("mem", 0),
                        nodes=alloc.get("node", 0),
                        elapsed_ms=int(elapsed) * 1000 if elapsed.isdigit() else 0,
                        started_at=_epoch(started),
                        ended_at=_epoch(ended),
                        portal=_portal(comment, name),
                        pull_in_elapsed=True,  # the Prolog's pull (slurmnode/prolog.py)
                    ),
                )
            )
        return rows


def parse_cpu_time(text: str) -> int | None:
    """sacct's `[D-][HH:]MM:SS[.mmm]` → milliseconds; None when it is not one."""
    days, _, rest = text.strip().rpartition("-")
    parts = rest.split(":")
    if not 2 <= len(parts) <= 3 or (days and not days.isdigit()):
        return None
    try:
        seconds = float(parts[-1])
        minutes = int(parts[-2])
        hours = int(parts[0]) if len(parts) == 3 else 0
    except ValueError:
        return None
    return round(((int(days or 0) * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_tres(text: str) -> dict[str, int]:
    """`billing=8,cpu=8,gres/gpu=4,mem=16G,node=1` → counts, memory in MiB."""
    found: dict[str, int] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not value:
            continue
        if name == "mem":
            unit = value[-1].upper()
            number = value[:-1] if unit in _MEMORY_UNITS else value
            factor = _MEMORY_UNITS.get(unit, 1)
            try:
                found["mem"] = round(float(number) * factor)
            except ValueError:
                continue
        elif value.isdigit():
            found[name] = int(value)
    return found


_EPOCH = datetime.fromtimestamp(0, UTC)


def _portal(comment: str, key: str) -> str:
    """The portal instance in `switchyard <instance> <key>`; "?" for any other comment (a
    job of another portal, or made before jobs carried it)."""
    words = comment.split()
    if len(words) == 3 and words[0] == "switchyard" and words[2] == key:
        return words[1]
    return "?"


def _epoch(value: str) -> datetime | None:
    return datetime.fromtimestamp(int(value), UTC) if value.isdigit() else None


def _slurm_time(moment: datetime) -> str:
    # Slurm reads times in its zone; the commands run with TZ=UTC (commands.py).
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
