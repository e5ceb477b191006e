"""Capacity on Slurm: its own view of node health, and leases as partitions (docs/capacity.md).

A mixin of SlurmBackend: it runs the same commands (`self.run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

from scheduling.backends.base import BackendError, LeaseView, NodeHealth
from scheduling.backends.slurm.parse import scalar, slurm_json

# Drains the portal makes carry this prefix: the health check tells them from Slurm's own.
DRAIN_PREFIX = "switchyard: "


class SlurmCapacity:
    run: Callable[..., str]  # the CommandRunner of the backend

    def drain(self, node: str, reason: str) -> None:
        # The prefix tells the health check this drain is the portal's own, not Slurm's.
        self.run(
            [
                "scontrol",
                "update",
                f"NodeName={node}",
                "State=DRAIN",
                f"Reason={DRAIN_PREFIX}{reason[:180] or 'drained'}",
            ]
        )

    def resume(self, node: str) -> None:
        """Idempotent: a node already back in service (another worker resumed it) is fine."""
        try:
            self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        except BackendError as exc:
            if "Invalid node state specified" not in str(exc):
                raise

    def health(self, nodes: list[str]) -> dict[str, NodeHealth]:
        """Slurm's own view of its nodes (`sinfo`): down, not responding, failed or drained
        by Slurm itself is unhealthy; down and not responding have lost their work."""
        data = slurm_json(self.run(["sinfo", "--json"]))
        found: dict[str, NodeHealth] = {}
        for node in data.get("nodes", []):
            name = node.get("name") or node.get("hostname")
            if name not in nodes:
                continue
            flags = {str(f).upper() for f in node.get("state_flags") or []}
            state = str(scalar(node.get("state")) or "").upper()
            flags.add(state)
            down = bool(flags & {"DOWN", "NOT_RESPONDING", "FAIL", "FAILING"})
            drained = bool(flags & {"DRAIN", "DRAINED", "DRAINING"})
            reason = str(node.get("reason") or "")
            if down:
                what = "not responding" if "NOT_RESPONDING" in flags else state.lower() or "down"
                found[name] = NodeHealth(
                    ok=False, down=True, reason=f"Slurm says {what}: {reason}".rstrip(": ")
                )
            elif drained and reason and not reason.startswith(DRAIN_PREFIX):
                found[name] = NodeHealth(ok=False, reason=f"drained by Slurm: {reason}")
            else:
                found[name] = NodeHealth(ok=True)
        return found

    def apply_lease(self, lease: LeaseView, *, now: float) -> None:
        """The lent nodes leave their queues' partitions and form a partition of their own,
        `lease-<id>`, with a time limit that ends with the lease (kept up to date)."""
        minutes = max(1, int((lease.ends_at - now) // 60))
        lent = set(lease.nodes)
        for partition in lease.lender_queues:
            nodes = self._partition_nodes(partition)
            if nodes & lent:
                self._set_partition_nodes(partition, nodes - lent)
        hostlist = ",".join(lease.nodes)
        exists = self._partition_nodes(lease.name, missing_ok=True) is not None
        verb = "update" if exists else "create"
        argv = ["scontrol", verb, f"PartitionName={lease.name}", f"MaxTime={minutes}"]
        if not exists:
            argv += [f"Nodes={hostlist}", "State=UP", "OverSubscribe=EXCLUSIVE"]
        self.run(argv)

    def end_lease(self, lease: LeaseView) -> None:
        """The lease's partition stops starting jobs (INACTIVE), the nodes go back to their
        queues' partitions, and the partition goes. Slurm keeps a partition while jobs are
        in it: then this raises, and the engine cancels them and asks again."""
        exists = self._partition_nodes(lease.name, missing_ok=True) is not None
        if exists:
            self.run(["scontrol", "update", f"PartitionName={lease.name}", "State=INACTIVE"])
        for partition in lease.lender_queues:
            nodes = self._partition_nodes(partition)
            if not set(lease.nodes) <= nodes:
                self._set_partition_nodes(partition, nodes | set(lease.nodes))
        if exists:
            self.run(["scontrol", "delete", f"PartitionName={lease.name}"])

    @overload
    def _partition_nodes(self, partition: str) -> set[str]: ...
    @overload
    def _partition_nodes(self, partition: str, *, missing_ok: bool) -> set[str] | None: ...
    def _partition_nodes(self, partition: str, *, missing_ok: bool = False) -> set[str] | None:
        try:
            out = self.run(["scontrol", "show", "partition", partition, "--oneliner"])
        except BackendError as exc:
            if missing_ok and ("Invalid partition" in str(exc) or "not found" in str(exc)):
                return None
            raise
        hostlist = next(
            (f.split("=", 1)[1] for f in out.split() if f.startswith("Nodes=")), "(null)"
        )
        if hostlist in ("(null)", ""):
            return set()
        return set(self.run(["scontrol", "show", "hostnames", hostlist]).split())

    def _set_partition_nodes(self, partition: str, nodes: set[str]) -> None:
        value = ",".join(sorted(nodes)) if nodes else '""'
        self.run(["scontrol", "update", f"PartitionName={partition}", f"Nodes={value}"])
