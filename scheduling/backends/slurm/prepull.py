"""Pre-pulling on Slurm (docs/containers.md, "Pre-pulling"): a pool's warm images onto its
nodes, and onto lent nodes before a lease starts.

A pull on a node is the node's own Prolog at work (slurmnode/prolog.py), as for a task's
image: for each node and image not already in the node's cache the portal submits a pull
job, pinned to the node (`--nodelist`), as the service account, in a partition the node is
in, one CPU and a little memory for as long as one pull may take, beside a root-owned image
file of the same format a task's job has (imagejob.py). The Prolog pulls the image into the
node's cache as the cache's account and writes the node's pull file; the job's own script
does nothing. The Prolog handles one image a job, so there is one job per image per node.

`prepull` waits for the pull files (polling squeue through the backend's runner) until the
timeout: a job that has not started by then (its node busy) is cancelled; one whose Prolog is
still pulling goes on, and the next job or pre-pull finds the image there.

The nodes' caches are on the nodes. Where the portal's host can read them (the localhost
cluster's `<state>/images/<node>`, option `node_image_cache`), an image already there costs
no job ("cached") and `image_caches` lists them; elsewhere every pre-pull is a job (whose pull
file says "cached" when the image was there) and the caches are not listed.
"""

from __future__ import annotations

import contextlib
import math
import os
import pwd
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduling.backends.base import BackendError, ImageCacheView, Prepulled
from scheduling.backends.images.prepull import cache_view
from scheduling.backends.images.readonly import ReadOnlyCache
from scheduling.backends.images.skopeo import ImageError, Skopeo
from scheduling.backends.sandbox import TMPFS
from scheduling.backends.slurm import imagejob
from scheduling.backends.slurm.parse import SlurmJob, slurm_json
from scheduling.decisions.images import ImageRefError, parse_image_ref
from scheduling.decisions.types import NodeView

# The Slurm account pull jobs are charged to (made on first use, like a project's).
PREPULL_ACCOUNT = "switchyard-prepull"
KEY_PREFIX = "prepull-"
_FILES_RE = re.compile(
    r"^\.?prepull-[0-9a-f]{16}(\.image\.json|\.pull\.[A-Za-z0-9._-]+\.json)?(\.tmp)?$"
)
# The job's script: nothing to do once its Prolog has pulled (only a command, no #SBATCH).
PULL_SCRIPT = "#!/bin/sh\n:\nexit 0\n"
POLL_S = 1.0
CLEAN_GRACE_S = 10.0  # for a pull job whose pull ended to end too
REMEMBER_S = 3600  # where the caches cannot be read: a pre-pulled image is not asked again
LEFTOVER_AGE_S = 24 * 3600  # a pull job's files left by a timed-out wait go after a day
_MEMORY_MIB = 64


@dataclass
class PullJob:
    """One image's pull job on one node."""

    ref: str  # the reference as asked
    digest: str
    node: str
    key: str
    job_id: str = ""
    result: Prepulled | None = None


def pull_job_argv(
    *,
    key: str,
    folder: Path,
    node: str,
    partition: str,
    user: pwd.struct_passwd,
    minutes: int,
    qos: str | None = None,
) -> list[str]:
    """The sbatch argv of a pull job (its script, PULL_SCRIPT, goes on stdin)."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={key}",
        f"--comment=switchyard-prepull {key}",
        f"--partition={partition}",
        f"--account={PREPULL_ACCOUNT}",
        f"--nodelist={node}",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        f"--mem={_MEMORY_MIB}M",
        f"--time={minutes}",
        "--export=NONE",
        f"--chdir={folder}",
        "--output=/dev/null",
    ]
    if qos:
        argv.append(f"--qos={qos}")
    return [*argv, f"--uid={user.pw_name}", f"--gid={user.pw_gid}"]


class SlurmPrepull:
    """Mixed into SlurmBackend: `prepull` and `image_caches` of the Backend protocol."""

    run: Callable[..., str]
    workdir: Path
    service_account: str | None
    qos: str | None
    node_image_cache: str | None  # "<folder>/{node}": a node's cache as this host sees it
    prepulls = True

    def nodes(self) -> list[NodeView]:
        raise NotImplementedError  # the backend's own

    def ensure_association(self, project: str, unix_user: str | None) -> None:
        raise NotImplementedError  # SlurmAccounts'

    # -- the Backend protocol ------------------------------------------------------------

    def prepull(
        self, images: list[str], *, nodes: list[str], timeout_s: float
    ) -> dict[str, Prepulled]:
        deadline = time.monotonic() + max(0.0, timeout_s)
        if not images:
            return {}
        self._sweep_leftovers()
        digests: dict[str, str] = {}
        out: dict[str, Prepulled] = {}
        for ref in images:
            digest = _resolve(ref, timeout_s)
            if isinstance(digest, Prepulled):
                out[ref] = digest
            else:
                digests[ref] = digest
        per_node: dict[str, dict[str, Prepulled]] = {ref: {} for ref in digests}
        jobs: list[PullJob] = []
        partitions = self._node_partitions() if digests and nodes else {}
        minutes = max(1, math.ceil(timeout_s / 60))
        for ref, digest in digests.items():
            for node in nodes:
                known = self._known_on(node, digest)
                if known is not None:
                    per_node[ref][node] = known
                    continue
                if node not in partitions:
                    per_node[ref][node] = Prepulled(False, "the node is in no partition")
                    continue
                job = PullJob(ref, digest, node, KEY_PREFIX + secrets.token_hex(8))
                try:
                    job.job_id = self._submit_pull(job, partitions[node], minutes)
                except BackendError as exc:
                    job.result = Prepulled(False, f"the pull job was refused: {exc}")
                except OSError as exc:
                    self._remove_pull_files(job.key)
                    job.result = Prepulled(False, f"the pull job's files could not be made: {exc}")
                jobs.append(job)
        self._wait_pulls(jobs, deadline, timeout_s)
        for job in jobs:
            assert job.result is not None
            per_node[job.ref][job.node] = job.result
            if job.result.ok:
                self._pulled_at()[(job.node, job.digest)] = time.monotonic()
        for ref, results in per_node.items():
            out[ref] = _summary(digests[ref], results)
        return {ref: out[ref] for ref in images}

    def image_caches(self) -> list[ImageCacheView]:
        """Each node's cache that this host can read (`node_image_cache`)."""
        if not self.node_image_cache:
            return []
        views = []
        for node in sorted(n.name for n in self.nodes()):
            cache = self._cache_of(node)
            if cache is not None:
                views.append(cache_view(cache, [node]))
        return views

    # -- the pieces ----------------------------------------------------------------------

    def _cache_of(self, node: str) -> ReadOnlyCache | None:
        if not self.node_image_cache or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", node):
            return None
        cache = ReadOnlyCache(self.node_image_cache.replace("{node}", node))
        return cache if cache.readable() else None

    def _known_on(self, node: str, digest: str) -> Prepulled | None:
        """The image's outcome on `node` without a job, if known: in the node's cache as this
        host reads it; where it cannot, pre-pulled there by this backend within REMEMBER_S
        (so that the periodic pass does not submit a job per node and image each time)."""
        cache = self._cache_of(node)
        if cache is not None:
            return Prepulled(True, f"cached ({digest[:19]})") if cache.get(digest) else None
        at = self._pulled_at().get((node, digest))
        if at is None or time.monotonic() - at > REMEMBER_S:
            return None
        return Prepulled(
            True, f"pre-pulled {(time.monotonic() - at) / 60:.0f} min ago ({digest[:19]})"
        )

    def _pulled_at(self) -> dict[tuple[str, str], float]:
        """(node, digest) → when a pull job of this backend said ready."""
        if not hasattr(self, "_prepulled"):
            self._prepulled: dict[tuple[str, str], float] = {}
        return self._prepulled

    def _node_partitions(self) -> dict[str, str]:
        """A partition each node is in (the first sinfo names, lease partitions last)."""
        found: dict[str, list[str]] = {}
        for line in self.run(["sinfo", "-a", "-h", "-N", "-o", "%N|%P"]).splitlines():
            node, _, partition = line.strip().partition("|")
            if node and partition:
                found.setdefault(node, []).append(partition.rstrip("*"))
        return {
            node: sorted(names, key=lambda p: p.startswith("lease-"))[0]
            for node, names in found.items()
        }

    def _pull_user(self) -> pwd.struct_passwd:
        name = self.service_account
        if not name:
            raise BackendError(
                "pre-pulling needs the service account (SWITCHYARD_SLURM_SERVICE_ACCOUNT): "
                "its pull jobs run as it"
            )
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise BackendError(f"no Unix account {name!r} on this host") from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise BackendError(f"refusing to run a pull job as {name!r}: it is root")
        return entry

    def _submit_pull(self, job: PullJob, partition: str, minutes: int) -> str:
        """The job's folder and image file, then sbatch: the job id."""
        user = self._pull_user()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o711)
        folder = self.workdir / job.key
        folder.mkdir()
        os.chown(folder, user.pw_uid, user.pw_gid)
        folder.chmod(0o700)
        imagejob.write_image_data(
            self.workdir,
            job.key,
            {
                "key": job.key,
                "uid": user.pw_uid,
                "image": job.ref,
                "digest": job.digest,
                # No TimeLimit raised after the pull: the job's limit covers one already.
                "walltime_min": None,
                "command": ["true"],  # never run: the job's script does nothing
                "script": None,
                "given": [],
                "needed": ["/dev", "/proc", *TMPFS, str(self.workdir)],
                "work": str(folder),
                "chdir": None,
            },
        )
        argv = pull_job_argv(
            key=job.key,
            folder=folder,
            node=job.node,
            partition=partition,
            user=user,
            minutes=minutes,
            qos=self.qos,
        )
        try:
            out = self.run(argv, stdin=PULL_SCRIPT)
        except BackendError as exc:
            if "Invalid account" not in str(exc):
                self._remove_pull_files(job.key)
                raise
            self.ensure_association(PREPULL_ACCOUNT, user.pw_name)
            out = self.run(argv, stdin=PULL_SCRIPT)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch answered {out.strip()!r}, not a job id")
        return job_id

    def _wait_pulls(self, jobs: list[PullJob], deadline: float, timeout_s: float) -> None:
        """Until every job's pull file says ready or failed, its job ended without one, or
        the deadline; then the jobs not started are cancelled and finished ones' files go."""
        waiting = [j for j in jobs if j.result is None]
        live: dict[str, SlurmJob] = {}
        while waiting:
            live = self._pull_squeue(waiting)
            for job in waiting:
                pull = _final_pull(self.workdir, job)
                if pull is not None:
                    job.result = _from_pull(job, pull)
                elif job.job_id not in live or live[job.job_id].as_job().state.finished:
                    state = live[job.job_id].state_name if job.job_id in live else "ended"
                    job.result = Prepulled(
                        False,
                        f"the pull job {job.job_id} on {job.node} ended ({state}) without its "
                        "Prolog pulling: is the node's Prolog configured (docs/containers.md, "
                        '"Slurm notes")?',
                    )
            waiting = [j for j in waiting if j.result is None]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        for job in waiting:
            current = live.get(job.job_id)
            if current is not None and current.state_name == "PENDING":
                self._cancel_pull(job.job_id)
                job.result = Prepulled(
                    False, f"no room on {job.node} for the pull job within {timeout_s:.0f}s"
                )
            else:
                job.result = Prepulled(False, f"still pulling on {job.node} after {timeout_s:.0f}s")
        self._clean_pulls(jobs)

    def _pull_squeue(self, jobs: list[PullJob]) -> dict[str, SlurmJob]:
        """squeue's view of these pull jobs (a job id reused by another job is not ours)."""
        keys = {j.job_id: j.key for j in jobs if j.job_id}
        if not keys:
            return {}
        argv = ["squeue", "--json", "--all", "--jobs=" + ",".join(keys)]
        try:
            data = slurm_json(self.run(argv))
        except BackendError as exc:
            if "Invalid job id" in str(exc):
                return {}
            raise
        found = [SlurmJob.from_squeue(j) for j in data.get("jobs", [])]
        return {j.job_id: j for j in found if keys.get(j.job_id) == j.key}

    def _cancel_pull(self, job_id: str) -> None:
        with contextlib.suppress(BackendError):
            self.run(["scancel", job_id])

    def _clean_pulls(self, jobs: list[PullJob]) -> None:
        """The files of the pull jobs that are over; a held job (its Prolog failed) cancelled.
        A job whose pull ended has only its empty script left to run: it is given
        CLEAN_GRACE_S to end, so that its files go now rather than with the sweep."""
        grace = time.monotonic() + CLEAN_GRACE_S
        while True:
            try:
                live = self._pull_squeue(jobs)
            except BackendError:
                return
            ending = [
                j
                for j in jobs
                if j.result is not None
                and j.job_id in live
                and live[j.job_id].state_name != "PENDING"
                and not live[j.job_id].as_job().state.finished
            ]
            if not ending or time.monotonic() >= grace:
                break
            time.sleep(POLL_S)
        for job in jobs:
            current = live.get(job.job_id)
            if current is not None and current.state_name == "PENDING":
                self._cancel_pull(job.job_id)
            elif current is not None and not current.as_job().state.finished:
                continue  # still pulling: the sweep takes its files later
            self._remove_pull_files(job.key)

    def _remove_pull_files(self, key: str) -> None:
        shutil.rmtree(self.workdir / key, ignore_errors=True)
        for path in self.workdir.glob(f"*{key}.*"):
            if _FILES_RE.match(path.name):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _sweep_leftovers(self) -> None:
        """Pull jobs' files older than a day (a wait that timed out left them)."""
        if not self.workdir.is_dir():
            return
        cutoff = time.time() - LEFTOVER_AGE_S
        for path in self.workdir.iterdir():
            if not (_FILES_RE.match(path.name) or path.name.startswith(KEY_PREFIX)):
                continue
            with contextlib.suppress(FileNotFoundError):
                if path.lstat().st_mtime < cutoff:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    elif _FILES_RE.match(path.name):
                        path.unlink()


def _resolve(ref: str, timeout_s: float) -> str | Prepulled:
    """The digest `ref` names now (its tag's, on the portal's host), or why not."""
    try:
        parsed = parse_image_ref(ref, default_registry="localhost")
    except ImageRefError as exc:
        return Prepulled(False, f"not an image reference: {exc}")
    if parsed.digest is not None:
        return parsed.digest
    try:
        return Skopeo(timeout_s=max(5.0, min(60.0, timeout_s))).digest(parsed)
    except ImageError as exc:
        return Prepulled(False, f"pulling failed: {exc.reason}")


def _final_pull(workdir: Path, job: PullJob) -> dict[str, Any] | None:
    for pull in imagejob.read_pulls(workdir, job.key, job.job_id):
        if pull.get("state") in ("ready", "failed"):
            return pull
    return None


def _from_pull(job: PullJob, pull: dict[str, Any]) -> Prepulled:
    if pull.get("state") != "ready":
        return Prepulled(False, str(pull.get("reason") or "the pull failed"))
    seconds, moved = float(pull.get("seconds") or 0.0), int(pull.get("bytes") or 0)
    if not seconds and not moved:
        return Prepulled(True, f"cached ({job.digest[:19]})")
    return Prepulled(True, f"pulled {job.digest[:19]} in {seconds:.1f}s ({moved / 1e6:.1f} MB)")


def _summary(digest: str, results: dict[str, Prepulled]) -> Prepulled:
    """One image over its nodes: ok when on every one; "cached" when it was everywhere."""
    if not results:
        return Prepulled(True, f"no nodes ({digest[:19]})")
    ok = all(r.ok for r in results.values())
    notes = {r.note for r in results.values()}
    if len(notes) == 1:
        return Prepulled(ok, notes.pop())
    return Prepulled(ok, "; ".join(f"{node}: {r.note}" for node, r in sorted(results.items())))
