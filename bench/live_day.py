"""The validation day on the live engine, compressed in time, against the simulator's verdict.

Run: `.venv/bin/python bench/live_day.py [--seed 1] [--speed 0.01]` (`make live-day`).

The simulator (docs/simulation.md) judges the site policy on a validation day of 760 jobs.
This plays the same day through the real portal: a fresh SWITCHYARD_VAR_DIR (SQLite, the
embedded broker), migrated and seeded like `manage.py up`, a real Celery worker with beat
(polling every 100 ms), and the local backend running every job as a real process on the
default site's 40 nodes. Each job of the day is submitted through the portal's own submission
service at its time × `speed`, runs `sleep <runtime × speed>` and asks for its walltime ×
`speed`; at 0.01 the ten-hour day takes six minutes, plus its tail.

When every task has ended, the tasks' recorded attempts (submitted, started, ended, nodes,
preempted or not) are scaled back by 1 / `speed` into the simulator's own `Run`, and the same
criteria (simulation/simulator/criteria.py) measure it, with the simulator's FIFO run of the
same day as the "before". The table says, per criterion, the simulator's value and verdict, the
live value and verdict, and whether they agree.

What does not scale with the clock: the local backend's start-up (some 30 ms, 3 s of day
time at 0.01), the poll interval (100 ms: 10 s), and SWITCHYARD_PREEMPT_AFTER_S, whose floor
is 1 s (100 s of day time; the simulator's is 10 s). The site's time-of-day windows (agent
and inference weights, the nightly lease) follow the site clock: the run sets
SWITCHYARD_SITE_TIMEZONE so that the site's clock reads between 10:00 and 11:00, in the day's
window, as the simulator's day has it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

POLL_MS = 100
TERMINAL = ("succeeded", "failed", "cancelled", "timeout", "skipped")
USER = "sim"


def site_timezone(now: datetime) -> str:
    """A fixed-offset zone in which `now` reads between 10:00 and 11:00 (Etc/GMT-N is N hours
    ahead of UTC: the sign is POSIX's, reversed)."""
    ahead = (10 - now.hour) % 24
    if ahead > 12:
        ahead -= 24
    return "UTC" if ahead == 0 else f"Etc/GMT{-ahead:+d}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--speed", type=float, default=0.01, help="live seconds per day second")
    parser.add_argument("--keep", action="store_true", help="keep the var dir and its logs")
    parser.add_argument("--json", type=Path, help="also write the result here")
    opts = parser.parse_args()
    if not 0.001 <= opts.speed <= 1:
        parser.error(f"--speed: expected between 0.001 and 1, got {opts.speed}")

    var_dir = c.fresh_var_dir("liveday")
    job_marker = str(var_dir / "local-backend")
    env = c.django_env(
        var_dir,
        SWITCHYARD_POLL_MS=str(POLL_MS),
        SWITCHYARD_PREEMPT_AFTER_S=str(max(1, round(10 * opts.speed))),
        SWITCHYARD_SITE_TIMEZONE=site_timezone(datetime.now(UTC)),
    )
    os.environ.clear()
    os.environ.update(env)
    c.prepare_site(env)
    import django

    django.setup()
    from bench import live_day_run as live  # Django is set up from here on

    worker = c.start(c.worker_argv(var_dir), env, var_dir / "worker.log")
    ok = False
    try:
        c.wait_until(
            lambda: " ready." in c.log_tail(worker, 100_000),
            timeout=60,
            what="the worker",
            procs=[worker],
        )
        jobs = live.day_jobs(opts.seed)
        user = live.prepare_accounts(jobs, USER)
        print(f"live day: {len(jobs)} jobs at x{opts.speed}, var dir {var_dir}", file=sys.stderr)
        t0 = time.time()
        errors: list[str] = []
        submitter = threading.Thread(
            target=live.submit_all, args=(jobs, user, t0, opts.speed, errors), daemon=True
        )
        submitter.start()
        last_end = max(j.submit + (j.spec.walltime_s or j.runtime) for j in jobs)
        deadline = t0 + last_end * opts.speed + 600
        while submitter.is_alive() or not live.all_ended(len(jobs)):
            if time.time() > deadline:
                raise RuntimeError(f"the day did not end in time: {live.states()}")
            if worker.poll() is not None:
                raise RuntimeError(f"the worker exited:\n{c.log_tail(worker)}")
            if errors:
                raise RuntimeError(f"a submission was refused: {errors[0]}")
            live.progress(t0, opts.speed)
            time.sleep(5)
        result = live.compare(opts.seed, live.recorded_run(t0, opts.speed), opts.speed)
        ok = True
    finally:
        c.stop(worker)
        c.stop_launcher(job_marker)
        c.kill_processes_mentioning(job_marker)
        if ok and not opts.keep:
            c.remove_var_dir(var_dir)
        else:
            print(f"live day: logs kept in {var_dir}", file=sys.stderr)
    print(live.format_comparison(result))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1, default=str))
    return 0 if all(row["agree"] for row in result["criteria"]) else 1


if __name__ == "__main__":
    sys.exit(main())
