"""Write Slurm's configuration from the site in the database (docs/slurm.md)."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from scheduling.models import Node, Pool, Queue
from scheduling.selectors import node_view, queue_policy, site_view_invalidate
from scheduling.sites.slurm import ClusterSettings, SlurmConfigError, render, scale_down

FILES = ("slurm.conf", "gres.conf", "topology.conf", "nodes.txt", "devices.txt")


class Command(BaseCommand):
    help = (
        "Write slurm.conf, gres.conf and topology.conf (plus nodes.txt and devices.txt for "
        "docker/slurm/cluster.sh) from the pools, nodes and queues in the database."
    )

    def add_arguments(self, parser):
        defaults = ClusterSettings()
        parser.add_argument("--out", required=True, help="directory to write the files into")
        parser.add_argument("--cluster", default=defaults.name, help="Slurm ClusterName")
        parser.add_argument(
            "--state-dir",
            default=defaults.state_dir,
            help="the cluster's state directory (spool, logs, pids, devices live under it)",
        )
        parser.add_argument(
            "--backend",
            action="append",
            default=[],
            help="only pools run by this backend alias (repeatable; default: every pool)",
        )
        parser.add_argument(
            "--max-nodes-per-pool",
            "--scale",
            dest="max_nodes",
            type=int,
            default=None,
            help="a scaled-down site: at most N nodes per pool, each with its real capacity",
        )
        parser.add_argument(
            "--prune-db",
            action="store_true",
            help="also delete from the database the nodes the scaled-down cluster leaves out "
            "and give its pools the cluster's fake device files, so this database describes "
            "exactly the cluster (for a dedicated database only)",
        )
        parser.add_argument(
            "--hostname",
            default=socket.gethostname().split(".")[0],
            help="this machine's short host name (NodeHostname, SlurmctldHost)",
        )
        parser.add_argument("--address", default=defaults.address)
        parser.add_argument("--ctld-port", type=int, default=defaults.ctld_port)
        parser.add_argument("--dbd-port", type=int, default=defaults.dbd_port)
        parser.add_argument("--node-port-base", type=int, default=defaults.node_port_base)
        parser.add_argument(
            "--image-pull-timeout",
            type=int,
            default=None,
            help="seconds one image pull may take on a node (the Prolog's; default: "
            "SWITCHYARD_IMAGE_PULL_TIMEOUT_S)",
        )
        parser.add_argument(
            "--no-enforce-associations",
            action="store_true",
            help="accept jobs whose account Slurm does not know",
        )

    def handle(self, *args: object, **opts: Any) -> None:
        cluster = ClusterSettings(
            name=opts["cluster"],
            state_dir=os.path.abspath(opts["state_dir"]),
            hostname=opts["hostname"],
            address=opts["address"],
            ctld_port=opts["ctld_port"],
            dbd_port=opts["dbd_port"],
            node_port_base=opts["node_port_base"],
            enforce_associations=not opts["no_enforce_associations"],
            image_pull_timeout_s=int(
                opts["image_pull_timeout"] or settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S
            ),
        )
        pools = Pool.objects.all()
        if opts["backend"]:
            pools = pools.filter(backend__in=opts["backend"])
        pool_names = set(pools.values_list("name", flat=True))
        if not pool_names:
            raise CommandError(
                "no pools to configure"
                + (f" for backend {', '.join(opts['backend'])}" if opts["backend"] else "")
                + " (run `manage.py seed_demo --backend slurm` for the default site)"
            )
        pool_nodes: dict[str, list] = {name: [] for name in pool_names}
        for node in Node.objects.filter(pool__name__in=pool_names).select_related("pool"):
            pool_nodes[node.pool.name].append(node_view(node))
        queues = [
            queue_policy(q)
            for q in Queue.objects.filter(pool__name__in=pool_names).select_related("pool")
        ]
        try:
            files = render(cluster, pool_nodes, queues, max_per_pool=opts["max_nodes"])
        except SlurmConfigError as exc:
            raise CommandError(str(exc)) from exc

        out = Path(opts["out"])
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            target = out / name
            if name in files:
                _write_atomic(target, files[name])
            elif target.exists():
                target.unlink()  # e.g. a topology.conf left from a site that had switches

        if opts["prune_db"] and opts["max_nodes"] is not None:
            kept = {
                n.name
                for nodes in scale_down(pool_nodes, opts["max_nodes"]).values()
                for n in nodes
            }
            with transaction.atomic():
                gone, _ = (
                    Node.objects.filter(pool__name__in=pool_names).exclude(name__in=kept).delete()
                )
                for pool in pools:
                    pool.gpu_devices = cluster.gpu_device_pattern
                    pool.control_devices = list(cluster.control_devices)
                    pool.save(update_fields=["gpu_devices", "control_devices"])
            site_view_invalidate()
            if opts["verbosity"] > 1:
                self.stdout.write(f"removed {gone} node(s) left out of the cluster")

        if opts["verbosity"] > 0:
            count = files["nodes.txt"].count("\n")
            partitions = files["slurm.conf"].count("\nPartitionName=")
            self.stdout.write(
                f"{out}: cluster {cluster.name}, {count} node(s), {partitions} partition(s), "
                f"{files['devices.txt'].count(chr(10))} device file(s)"
                + (", topology" if "topology.conf" in files else "")
            )


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
