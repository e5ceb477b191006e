"""Settings of the engine's own work: how often each pass runs and how long its messages may
wait, and the limits of capacity, accounting, the policy and what-if runs.

Part of config/settings.py, which imports every name here by name.
"""

from __future__ import annotations

from pathlib import Path

from config.env import env_bool, env_int, env_list, env_str
from config.paths import VAR_DIR
from config.settings_backends import SWITCHYARD_PREPULL_SECONDS

SWITCHYARD_POLL_SECONDS = float(env_int("SWITCHYARD_POLL_MS", 1000)) / 1000
# A poll message not run within this long is dropped. Generous on purpose: under load polls
# wait behind dispatches, and one dropped after twice the interval (as before) meant a busy
# worker stopped polling at all; the extra ones are skipped cheaply (scheduling/tasks.py).
SWITCHYARD_POLL_EXPIRES_SECONDS = max(SWITCHYARD_POLL_SECONDS * 2, 10.0)
# How long a dispatch waits for the jobs it just submitted to start, so that a local job
# shows `running` at once rather than at the next poll (scheduling/engine/dispatch.py); 0: never.
SWITCHYARD_START_WAIT_SECONDS = env_int("SWITCHYARD_START_WAIT_MS", 50) / 1000
SWITCHYARD_SWEEP_SECONDS = env_int("SWITCHYARD_SWEEP_SECONDS", 15)
# A task still `pending` this long after its last change is dispatched again by the sweep.
SWITCHYARD_PENDING_GRACE_SECONDS = env_int("SWITCHYARD_PENDING_GRACE_SECONDS", 10)
# How long one dispatcher owns a task before another may take it over (worker died mid-way).
SWITCHYARD_DISPATCH_LEASE_SECONDS = env_int("SWITCHYARD_DISPATCH_LEASE_SECONDS", 60)

SWITCHYARD_RETRY_BACKOFF_SECONDS = float(env_int("SWITCHYARD_RETRY_BACKOFF_MS", 1000)) / 1000
SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS = 60.0
SWITCHYARD_TRIGGER_SECONDS = float(env_int("SWITCHYARD_TRIGGER_MS", 2000)) / 1000
# How often the live-sandbox warm pools are brought to what the queues say (docs/sandboxes.md).
SWITCHYARD_WARM_POOL_SECONDS = env_int("SWITCHYARD_WARM_POOL_SECONDS", 10)
# Trigger files must lie under one of these folders (users cannot probe the filesystem).
SWITCHYARD_TRIGGER_ROOTS = env_list("SWITCHYARD_TRIGGER_ROOTS", [str(VAR_DIR / "triggers")])

# --- Capacity (docs/capacity.md) --------------------------------------------------------------
# A lease lasts at most this long (the default site lends inference GPUs for 4 h).
SWITCHYARD_LEASE_MAX_HOURS = env_int("SWITCHYARD_LEASE_MAX_HOURS", 8)
# A waiting task preempts lower-level preemptible work only after waiting this long.
SWITCHYARD_PREEMPT_AFTER_S = env_int("SWITCHYARD_PREEMPT_AFTER_S", 10)
# How often the capacity pass (preemption, leases, start-up timeouts) and the health
# checks run.
SWITCHYARD_CAPACITY_SECONDS = float(env_int("SWITCHYARD_CAPACITY_MS", 5000)) / 1000
SWITCHYARD_HEALTH_SECONDS = float(env_int("SWITCHYARD_HEALTH_MS", 30000)) / 1000

# --- Accounting (docs/accounting.md) --------------------------------------------------------
# The currency of new rates.
SWITCHYARD_CURRENCY = env_str("SWITCHYARD_CURRENCY", "CNY")
# How often ended attempts are metered (the ones the attempt-end hook could not meter yet),
# and how often the backends' accounting is reconciled with the records (and over how long).
SWITCHYARD_METER_SECONDS = float(env_int("SWITCHYARD_METER_MS", 60_000)) / 1000
SWITCHYARD_RECONCILE_SECONDS = float(env_int("SWITCHYARD_RECONCILE_MS", 3_600_000)) / 1000
SWITCHYARD_RECONCILE_WINDOW_HOURS = env_int("SWITCHYARD_RECONCILE_WINDOW_HOURS", 48)
# A record may differ from the backend's own by this fraction before it is a mismatch.
SWITCHYARD_RECONCILE_TOLERANCE = env_str("SWITCHYARD_RECONCILE_TOLERANCE", "0.001")

# --- Policy (docs/policy.md) ----------------------------------------------------------------
# Time-of-day weights are read in the site's time zone.
SWITCHYARD_SITE_TIMEZONE = env_str("SWITCHYARD_SITE_TIMEZONE", "UTC")
# Fair-share usage halves every this many hours.
SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS = env_int("SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS", 7 * 24)
# How often the levels pass runs (levels move, approvals expire, quota-held tasks are
# reconsidered).
SWITCHYARD_POLICY_SECONDS = float(env_int("SWITCHYARD_POLICY_MS", 5000)) / 1000
# Every queue's load is sampled this often, for the dashboards (docs/console.md).
SWITCHYARD_SAMPLE_SECONDS = float(env_int("SWITCHYARD_SAMPLE_MS", 60_000)) / 1000
# A priority-raise request lasts at most this long; a descriptor's `priority: high` asks
# for this long.
SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS = env_int("SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS", 30 * 24)
SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS = env_int("SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS", 24)
# The most priority requests one person may have pending at once (a sweep asks once for its
# project's tasks in a queue, not once per task).
SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING = env_int("SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING", 20)

# --- What-if simulations (docs/simulation.md) ---------------------------------------------
# Traces uploaded on the console's Simulations page, one folder per upload; the largest
# accepted; how often a worker looks for runs no message announced (a broker that was down).
SWITCHYARD_SIMULATION_DIR = Path(env_str("SWITCHYARD_SIMULATION_DIR", str(VAR_DIR / "simulations")))
SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES = env_int(
    "SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES", 20 * 1024 * 1024
)
SWITCHYARD_SIMULATION_SWEEP_SECONDS = env_int("SWITCHYARD_SIMULATION_SWEEP_SECONDS", 60)

# --- Storage and Files (docs/storage.md) ----------------------------------------------------
# The largest file one upload to Files may store (the API's PUT, the page's form).
SWITCHYARD_FILES_UPLOAD_MAX_BYTES = env_int("SWITCHYARD_FILES_UPLOAD_MAX_BYTES", 1 << 30)
# The Python the Files helper runs as a job account (standard library only, 3.9 or later):
# one every account may run, which the portal's own virtual environment may not be.
SWITCHYARD_FILES_HELPER_PYTHON = env_str("SWITCHYARD_FILES_HELPER_PYTHON", "/usr/bin/python3")
# How often tasks' working folders past their area's retention are removed (a day is the
# shortest retention, so an hour late is nothing), and members who left a project lately are
# checked to be out of its group (the message at their removal may have been lost).
SWITCHYARD_STORAGE_HOUSEKEEPING_SECONDS = env_int("SWITCHYARD_STORAGE_HOUSEKEEPING_SECONDS", 3600)
# Where the demo site's storage areas live (seed_demo): no root-owned /scratch needed.
SWITCHYARD_DEMO_STORAGE_DIR = Path(env_str("SWITCHYARD_DEMO_STORAGE_DIR", str(VAR_DIR / "storage")))

# One beat sends, however many run: the others wait on its lock (config/runtime/beat.py).
CELERY_BEAT_SCHEDULER = "config.runtime.beat:SingleBeatScheduler"
# Each periodic task: how often it is sent, and how long its message may wait before it is
# dropped (twice the period unless said: the next one is already on its way).
CELERY_BEAT_SCHEDULE = {
    name: {"task": task, "schedule": float(every), "options": {"expires": expires or every * 2}}
    for name, task, every, expires in (
        (
            "poll-backends",
            "scheduling.poll_backends",
            SWITCHYARD_POLL_SECONDS,
            SWITCHYARD_POLL_EXPIRES_SECONDS,
        ),
        ("timers", "scheduling.timers", SWITCHYARD_TRIGGER_SECONDS, None),
        ("policy", "scheduling.policy_pass", SWITCHYARD_POLICY_SECONDS, None),
        ("capacity", "scheduling.capacity_pass", SWITCHYARD_CAPACITY_SECONDS, None),
        ("health", "scheduling.health_pass", SWITCHYARD_HEALTH_SECONDS, None),
        ("sweep-pending", "scheduling.sweep_pending", SWITCHYARD_SWEEP_SECONDS, None),
        ("meter", "accounting.meter_pass", SWITCHYARD_METER_SECONDS, None),
        ("reconcile", "accounting.reconcile_pass", SWITCHYARD_RECONCILE_SECONDS, None),
        ("load-sample", "scheduling.load_sample", SWITCHYARD_SAMPLE_SECONDS, None),
        ("simulations", "simulation.run_queued", SWITCHYARD_SIMULATION_SWEEP_SECONDS, None),
        ("housekeeping", "scheduling.housekeeping", 600.0, None),
        ("prepull", "scheduling.prepull_pass", SWITCHYARD_PREPULL_SECONDS, None),
        ("warm-pools", "scheduling.warm_pools", SWITCHYARD_WARM_POOL_SECONDS, None),
        (
            "storage-housekeeping",
            "scheduling.storage_housekeeping",
            SWITCHYARD_STORAGE_HOUSEKEEPING_SECONDS,
            None,
        ),
    )
}

# A web process hands a stored task's dispatch to a thread of its own, which sends what has
# gathered as one message (scheduling/outbox.py); off, each request publishes its own.
SWITCHYARD_PUBLISH_IN_BACKGROUND = env_bool("SWITCHYARD_PUBLISH_IN_BACKGROUND", default=True)
