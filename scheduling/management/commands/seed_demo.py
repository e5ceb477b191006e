"""Build the seed's default site (40 nodes, three pools, three queues) and demo accounts."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction
from rest_framework.authtoken.models import Token

from portal.models import Membership, Project
from scheduling.models import Node, Pool, Queue, RoutingRule
from scheduling.selectors import site_view_invalidate

GIB = 1024
HOUR = 3600

# name, kind, [(count, prefix, cpus, memory GiB, gpus, gpu model)]
POOLS = [
    ("gpu-train", Pool.Kind.GPU_TRAINING, [(20, "gpu", 64, 1024, 8, "A100")]),
    (
        "inference-agent",
        Pool.Kind.INFERENCE,
        [(10, "inf", 32, 256, 4, "L40S"), (5, "agt", 64, 512, 0, "")],
    ),
    ("cpu-hpc", Pool.Kind.CPU_HPC, [(5, "cpu", 64, 512, 0, "")]),
]

QUEUES = [
    dict(
        name="training",
        pool="gpu-train",
        policy=Queue.Policy.PRIORITY_QUOTA,
        task_types=["ai-training"],
        max_walltime_s=None,
        default_walltime_s=None,
        requires_estimate=True,
        preemptible=False,
        allocation=Queue.Allocation.WHOLE_NODE,
        cpu_oversubscription=1,
        max_concurrency=None,
    ),
    dict(
        name="inference-agent",
        pool="inference-agent",
        policy=Queue.Policy.ELASTIC,
        task_types=["ai-inference", "agent", "sandbox"],
        max_walltime_s=1 * HOUR,
        default_walltime_s=1 * HOUR,
        requires_estimate=False,
        preemptible=True,
        allocation=Queue.Allocation.PACK,
        cpu_oversubscription=4,
        max_concurrency=500,
    ),
    dict(
        name="hpc",
        pool="cpu-hpc",
        policy=Queue.Policy.FAIRSHARE,
        task_types=["hpc-simulation"],
        max_walltime_s=72 * HOUR,
        default_walltime_s=72 * HOUR,
        requires_estimate=False,
        preemptible=False,
        allocation=Queue.Allocation.PACK,
        cpu_oversubscription=1,
        max_concurrency=None,
    ),
]

RULES = [
    (10, "ai-training", "training"),
    (20, "hpc-simulation", "hpc"),
    (30, "ai-inference", "inference-agent"),
    (40, "agent", "inference-agent"),
    (50, "sandbox", "inference-agent"),
]

# username, password, role text, staff, superuser, group
ACCOUNTS = [
    ("alice", "alice-demo-pass", "researcher (materials, climate)", False, False, None),
    ("bob", "bob-demo-pass", "researcher (genomics)", False, False, None),
    ("quinn", "quinn-demo-pass", "queue admin", True, False, "queue-admin"),
    ("admin", "admin-demo-pass", "platform admin", True, True, "platform-admin"),
    ("finn", "finn-demo-pass", "finance", False, False, "finance"),
]

PROJECTS = [
    ("materials", "Materials simulation", "alice"),
    ("climate", "Climate model emulation", "alice"),
    ("genomics", "Genomics pipelines", "bob"),
]


class Command(BaseCommand):
    help = "Build the default 40-node site and the demo accounts (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--backend", default="local", help="compute backend alias for every pool"
        )
        parser.add_argument("--quiet", action="store_true", help="print nothing")

    @transaction.atomic
    def handle(self, *args, backend: str, quiet: bool, **options):
        pools = {}
        for name, kind, groups in POOLS:
            pool, _ = Pool.objects.update_or_create(
                name=name, defaults={"kind": kind, "backend": backend}
            )
            pools[name] = pool
            for count, prefix, cpus, mem_gib, gpus, model in groups:
                for i in range(1, count + 1):
                    Node.objects.update_or_create(
                        name=f"{prefix}{i:03d}",
                        defaults=dict(
                            pool=pool,
                            cpus=cpus,
                            memory_mib=mem_gib * GIB,
                            gpus=gpus,
                            gpu_model=model,
                            switch=f"{name}-sw{(i - 1) // 10 + 1}",
                        ),
                    )
        queues = {}
        for spec in QUEUES:
            spec = dict(spec)
            pool, name = pools[spec.pop("pool")], spec.pop("name")
            queues[name], _ = Queue.objects.update_or_create(
                name=name, defaults={"pool": pool, **spec}
            )
        RoutingRule.objects.all().delete()
        for order, match_type, queue in RULES:
            RoutingRule.objects.create(order=order, match_type=match_type, queue=queues[queue])

        users = {}
        lines = []
        for username, password, role, staff, superuser, group in ACCOUNTS:
            user, _ = User.objects.get_or_create(username=username)
            user.is_staff, user.is_superuser = staff, superuser
            user.email = f"{username}@example.org"
            user.set_password(password)
            user.save()
            if group:
                user.groups.add(Group.objects.get_or_create(name=group)[0])
            token, _ = Token.objects.get_or_create(user=user)
            users[username] = user
            lines.append((username, password, role, token.key))
        for slug, title, pi in PROJECTS:
            project, _ = Project.objects.update_or_create(
                slug=slug, defaults={"name": title, "pi": users[pi]}
            )
            Membership.objects.update_or_create(
                user=users[pi], project=project, defaults={"role": Membership.Role.PI}
            )
        site_view_invalidate()
        if quiet:
            return
        self.stdout.write(
            f"Default site: {Node.objects.count()} nodes in {len(pools)} pools, "
            f"{len(queues)} queues, {len(RULES)} routing rules (backend: {backend})."
        )
        self.stdout.write("Demo accounts (username / password / role / API token):")
        for username, password, role, token in lines:
            self.stdout.write(f"  {username:<6} {password:<16} {role:<32} {token}")
