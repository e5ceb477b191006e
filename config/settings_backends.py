"""Settings of the compute backends, by alias (a pool names one), and what a job may use.

Part of config/settings.py, which imports every name here by name.
"""

from __future__ import annotations

from typing import Any

from config.env import env_bool, env_int, env_list, env_networks, env_str
from config.paths import VAR_DIR

# --- Compute backends, by alias (a pool names one) ----------------------------------------
# Jobs never run as root (docs/security.md): as the researcher's own cluster account where
# one is mapped, else as this unprivileged account (docker/job-accounts.sh creates it).
SWITCHYARD_JOB_ACCOUNT = env_str("SWITCHYARD_JOB_ACCOUNT", "switchyard-job")
# What every local job may use beyond what it asked for.
SWITCHYARD_JOB_MAX_PROCESSES = env_int("SWITCHYARD_JOB_MAX_PROCESSES", 512)
SWITCHYARD_JOB_MAX_OUTPUT_MB = env_int("SWITCHYARD_JOB_MAX_OUTPUT_MB", 64)
SWITCHYARD_JOB_MAX_DISK_MB = env_int("SWITCHYARD_JOB_MAX_DISK_MB", 10 * 1024)
# Each local job's own control group, which holds it to the memory and CPUs it asked for:
# `auto` (as root, in the worker's cgroup v1 memory and cpu groups), `off` (the watchdog
# alone), or a cgroup v2 folder delegated to the portal (docs/security.md, "Limits").
SWITCHYARD_JOB_CGROUP = env_str("SWITCHYARD_JOB_CGROUP", "auto")
SWITCHYARD_JOB_RETENTION_HOURS = env_int("SWITCHYARD_JOB_RETENTION_HOURS", 7 * 24)
# Ended jobs' folders of one user / one project together: past it the oldest go before their
# retention ends (0: no total).
SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER = env_int("SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER", 50)
SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT = env_int(
    "SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT", 200
)
# Networks no batch job may reach (CIDRs, comma-separated), besides the control plane's own
# addresses, which are always blocked (docs/security.md, "Network").
SWITCHYARD_JOB_BLOCKED_NETWORKS = [str(n) for n in env_networks("SWITCHYARD_JOB_BLOCKED_NETWORKS")]
# --- Container images (docs/containers.md) -------------------------------------------------
# The registry a reference without a host names (`demo/tiny:1`), and the registries a task's
# image may come from (host[:port], comma-separated). None allowed by default: a task with an
# image is refused, saying that no registry is configured.
SWITCHYARD_IMAGE_REGISTRY = env_str("SWITCHYARD_IMAGE_REGISTRY", "")
SWITCHYARD_IMAGE_REGISTRIES = env_list("SWITCHYARD_IMAGE_REGISTRIES", [])
# How long a submission waits for the registry to say what a tag names.
SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S = env_int("SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S", 10)
# One submission's registry questions (a batch's, a workflow's) all within this many seconds:
# past it the submission is refused (503, try again), so no request holds a web worker long.
# Each distinct image is asked once per submission, and a tag's answer is kept this many
# seconds for the next submissions (0: never kept).
SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S = env_int("SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S", 20)
SWITCHYARD_IMAGE_TAG_CACHE_S = env_int("SWITCHYARD_IMAGE_TAG_CACHE_S", 10)
# A local backend's image cache: at most this many MiB (least recently used images evicted,
# never one a job holds), no image that unpacks to more than the second, and skopeo's pull
# and umoci's unpack each killed after the timeout.
SWITCHYARD_IMAGE_CACHE_MAX_MB = env_int("SWITCHYARD_IMAGE_CACHE_MAX_MB", 20 * 1024)
SWITCHYARD_IMAGE_MAX_UNPACKED_MB = env_int("SWITCHYARD_IMAGE_MAX_UNPACKED_MB", 8 * 1024)
# An image whose manifest lists more than this many MiB to download is refused before a byte
# of it is pulled (and a registry that sends more than the manifest says is cut off).
SWITCHYARD_IMAGE_MAX_PULL_MB = env_int(
    "SWITCHYARD_IMAGE_MAX_PULL_MB", SWITCHYARD_IMAGE_MAX_UNPACKED_MB
)
SWITCHYARD_IMAGE_PULL_TIMEOUT_S = env_int("SWITCHYARD_IMAGE_PULL_TIMEOUT_S", 900)
# At most this many images are pulled at once per local backend root; the other jobs wait.
SWITCHYARD_IMAGE_MAX_PULLS = env_int("SWITCHYARD_IMAGE_MAX_PULLS", 4)
# Pre-pulling (docs/containers.md): how often each pool's warm images are pulled onto its
# nodes (and the caches' listing recorded for the Capacity page), and how long a lease waits
# for the borrower's warm images on its nodes before it starts anyway.
SWITCHYARD_PREPULL_SECONDS = float(env_int("SWITCHYARD_PREPULL_MS", 60_000)) / 1000
SWITCHYARD_LEASE_PREPULL_TIMEOUT_S = env_int("SWITCHYARD_LEASE_PREPULL_TIMEOUT_S", 300)
COMPUTE_BACKENDS: dict[str, dict[str, Any]] = {
    "local": {
        "BACKEND": "scheduling.backends.local.LocalBackend",
        # Its jobs are processes here: the host's process limits bound the local queues.
        "RUNS_ON_THIS_HOST": True,
        "OPTIONS": {
            "root": env_str("SWITCHYARD_LOCAL_ROOT") or str(VAR_DIR / "local-backend"),
            "bwrap": env_str("SWITCHYARD_BWRAP", "bwrap"),
            "slirp4netns": env_str("SWITCHYARD_SLIRP4NETNS", "slirp4netns"),
            "inventory_ttl_s": 2.0,
            "job_account": SWITCHYARD_JOB_ACCOUNT,
            "max_processes": SWITCHYARD_JOB_MAX_PROCESSES,
            "max_output_bytes": SWITCHYARD_JOB_MAX_OUTPUT_MB << 20,
            "max_disk_bytes": SWITCHYARD_JOB_MAX_DISK_MB << 20,
            "cgroups": SWITCHYARD_JOB_CGROUP,
            "retention_s": SWITCHYARD_JOB_RETENTION_HOURS * 3600,
            "max_folder_bytes_per_user": SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER << 30,
            "max_folder_bytes_per_project": SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT << 30,
            # The node check (docs/capacity.md): the host's load, disk and GPU temperatures,
            # or a site's own function.
            "health_probe": env_str(
                "SWITCHYARD_LOCAL_HEALTH_PROBE", "scheduling.backends.local.health.host_probe"
            ),
        },
    },
}
# The localhost cluster (docker/slurm/cluster.sh) writes its settings to <dir>/env.
SWITCHYARD_SLURM_DIR = env_str("SWITCHYARD_SLURM_DIR", "/var/tmp/switchyard-slurm")
COMPUTE_BACKENDS["slurm"] = {
    "BACKEND": "scheduling.backends.slurm.SlurmBackend",
    "OPTIONS": {
        "cluster": env_str("SWITCHYARD_SLURM_CLUSTER", "switchyard"),
        "slurm_conf": env_str("SLURM_CONF") or f"{SWITCHYARD_SLURM_DIR}/etc/slurm.conf",
        "workdir": env_str("SWITCHYARD_SLURM_WORKDIR") or str(VAR_DIR / "slurm-jobs"),
        "command_timeout_s": float(env_int("SWITCHYARD_SLURM_TIMEOUT_S", 20)),
        "service_account": env_str("SWITCHYARD_SLURM_SERVICE_ACCOUNT") or SWITCHYARD_JOB_ACCOUNT,
        "max_processes": SWITCHYARD_JOB_MAX_PROCESSES,
        "max_file_bytes": SWITCHYARD_JOB_MAX_DISK_MB << 20,
        # sbatch calls a dispatch batch runs at once (docs/slurm.md)
        "submit_concurrency": env_int("SWITCHYARD_SLURM_SUBMIT_CONCURRENCY", 4),
        # Multi-node jobs share their node's network so srun and MPI reach the other nodes:
        # only where a firewall keeps the compute nodes from the portal's services (docs/slurm.md).
        "multinode_host_network": env_bool("SWITCHYARD_SLURM_MULTINODE_HOST_NETWORK", False),
        # Where this host sees each node's image cache ({node}: its name), for pre-pulling
        # and the Capacity page: the localhost cluster's; empty where the nodes' are remote.
        "node_image_cache": env_str(
            "SWITCHYARD_SLURM_NODE_IMAGE_CACHE", f"{SWITCHYARD_SLURM_DIR}/images/{{node}}"
        )
        or None,
        # A node-local folder every job account may make folders in, where a live sandbox's
        # watcher keeps its socket and agent (docs/sandbox-slurm.md).
        "session_dir": env_str("SWITCHYARD_SLURM_SESSION_DIR", "/tmp"),
    },
}
