"""Write the default site (scheduling/sites/default.py) to the database, and demo accounts."""

from __future__ import annotations

from datetime import UTC, datetime, time
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction

from accounting.models import Rate
from portal.auth import issue_token
from portal.models import Membership, Project
from scheduling.models import (
    CatalogueImage,
    ImageRegistry,
    LeaseSchedule,
    LevelRule,
    Node,
    Pool,
    PoolBorrowing,
    Queue,
    Quota,
    RoutingRule,
    StorageArea,
)
from scheduling.models.capacity import backfills_across_pools
from scheduling.selectors import site_view_invalidate
from scheduling.sites import default_site

# username, password, role text, staff, superuser, group
ACCOUNTS = [
    ("alice", "alice-demo-pass", "lead of materials and climate", False, False, None),
    ("bob", "bob-demo-pass", "lead of genomics", False, False, None),
    ("quinn", "quinn-demo-pass", "queue admin", False, False, "queue-admin"),
    ("admin", "admin-demo-pass", "platform admin", True, True, "platform-admin"),
    ("finn", "finn-demo-pass", "finance", False, False, "finance"),
]

PROJECTS = [
    ("materials", "Materials simulation", "alice"),
    ("climate", "Climate model emulation", "alice"),
    ("genomics", "Genomics pipelines", "bob"),
]


def give_site_quotas(project: Project, site, queues: dict[str, Queue]) -> None:
    """The quotas the site gives every project (its templates), on `project`."""
    for quota in site.project_quotas:
        Quota.objects.update_or_create(
            project=project,
            queue=queues[quota.queue],
            user=None,
            resource=quota.resource,
            defaults={
                "limit": quota.limit,
                "over_quota": quota.over_quota,
                "borrowing_limit": quota.borrowing_limit,
                "lending_limit": quota.lending_limit,
            },
        )


class Command(BaseCommand):
    help = "Build the default 40-node site and the demo accounts (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--backend", default="local", help="compute backend alias for every pool"
        )
        parser.add_argument("--quiet", action="store_true", help="print nothing")
        parser.add_argument(
            "--if-new",
            action="store_true",
            help="leave a demo site written before (with this backend) as it is, changes "
            "kept: only give each demo account a new API token, printed",
        )

    @transaction.atomic
    def handle(self, *args, backend: str, quiet: bool, if_new: bool = False, **options):
        site = default_site()
        if if_new and _written(site):
            if not quiet:
                self.stdout.write(
                    "The demo site as it was left, changes kept (`manage.py seed_demo` writes "
                    "it afresh)."
                )
                others = _other_backends(site, backend)
                if others:
                    self.stdout.write(
                        f"Its pools run on {', '.join(others)}, not {backend}: "
                        "`manage.py seed_demo --backend ...` (or `up --reseed`) moves them."
                    )
                self._accounts(
                    [
                        (*account[:3], issue_token(user)[0])
                        for account, user in _demo()
                        if user.is_active
                    ],
                    note=" (passwords as the demo set them, unless changed since)",
                )
            return
        pools = {}
        for spec in site.pools:
            # The demo's GPUs are virtual (counted, without device files): a site with
            # real GPUs sets its pools' device files (docs/security.md).
            pool, _ = Pool.objects.update_or_create(
                name=spec.name,
                defaults={
                    "kind": spec.kind,
                    "backend": backend,
                    "gpu_devices": "",
                    "control_devices": [],
                },
            )
            pools[spec.name] = pool
            for node in spec.nodes:
                Node.objects.update_or_create(
                    name=node.name,
                    defaults=dict(
                        pool=pool,
                        cpus=node.cpus,
                        memory_mib=node.memory_mib,
                        gpus=node.gpus,
                        gpu_model=node.gpu_model or "",
                        switch=node.switch or "",
                    ),
                )
        queues = {}
        for q in site.queues:
            queues[q.name], _ = Queue.objects.update_or_create(
                name=q.name,
                defaults=dict(
                    pool=pools[q.pool],
                    policy=q.policy,
                    task_types=list(q.task_types),
                    max_walltime_s=q.max_walltime_s,
                    default_walltime_s=q.default_walltime_s,
                    requires_estimate=q.requires_estimate,
                    preemptible=q.preemptible,
                    allocation=q.allocation,
                    cpu_oversubscription=q.cpu_oversubscription,
                    max_concurrency=q.max_concurrency,
                    weight_schedule=site.weight_schedules.get(q.name, []),
                    startup_timeout_s=site.startup_timeouts.get(q.name),
                    warm_pool=site.warm_pools.get(q.name, {}),
                    idle_scale_in_s=q.idle_scale_in_s,
                    over_concurrency=q.over_concurrency,
                    wait_bound_s=q.wait_bound_s,
                ),
            )
        LeaseSchedule.objects.all().delete()
        for lease in site.lease_schedules:
            hours, minutes = (int(part) for part in lease.start.split(":"))
            LeaseSchedule.objects.create(
                pool=pools[lease.pool],
                queue=queues[lease.queue],
                count=lease.count,
                start=time(hours, minutes),
                duration_s=lease.duration_s,
            )
        # Backfill across pools, where the backend does it (the local backend; not Slurm).
        PoolBorrowing.objects.all().delete()
        for pair in site.borrowing:
            PoolBorrowing.objects.create(
                borrower=pools[pair.borrower],
                lender=pools[pair.lender],
                enabled=backfills_across_pools(backend),
                cpus_per_free_gpu=pair.cpus_per_free_gpu,
            )
        LevelRule.objects.all().delete()
        for rule in site.level_rules:
            LevelRule.from_rule(rule, queues).save()
        # Prices are never rewritten (a price applies from its date on): seed_demo writes them
        # once, valid since 2020.
        if not Rate.objects.exists():
            since = datetime(2020, 1, 1, tzinfo=UTC)
            for rate in site.rates:
                Rate.objects.create(
                    queue=queues[rate.queue] if rate.queue else None,
                    metric=rate.metric,
                    price=Decimal(rate.price),
                    valid_from=since,
                    note="default site",
                )
        # The site's storage areas, below the demo's storage folder (no root-owned /scratch).
        root = str(settings.SWITCHYARD_DEMO_STORAGE_DIR).rstrip("/")
        for spec_area in site.storage_areas:
            area, _ = StorageArea.objects.update_or_create(
                name=spec_area.name,
                defaults={
                    "path": root + spec_area.path,
                    "owner": spec_area.owner,
                    "read_only": spec_area.read_only,
                    "quota_bytes": spec_area.quota_bytes,
                },
            )
            area.pools.set([pools[name] for name in spec_area.pools])
        _seed_catalogue(site, pools)
        RoutingRule.objects.all().delete()
        for routing_rule in site.rules:
            RoutingRule.from_view(routing_rule, queues).save()

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
            token, _ = issue_token(user)  # after set_password, which revoked the old ones
            users[username] = user
            lines.append((username, password, role, token))
        for slug, title, pi in PROJECTS:
            project, _ = Project.objects.update_or_create(
                slug=slug, defaults={"name": title, "pi": users[pi]}
            )
            Membership.objects.update_or_create(
                user=users[pi], project=project, defaults={"role": Membership.Role.PI}
            )
            give_site_quotas(project, site, queues)
        # The demo queue admin decides the priority requests of every queue.
        for queue in queues.values():
            queue.admins.add(users["quinn"])
        site_view_invalidate()
        if quiet:
            return
        self.stdout.write(
            f"Default site: {Node.objects.count()} nodes in {len(pools)} pools, "
            f"{len(queues)} queues, {len(site.rules)} routing rules, {len(site.level_rules)} "
            f"level rules, {len(site.project_quotas)} quota(s) per project (backend: {backend})."
        )
        self._accounts(lines)

    def _accounts(self, lines: list[tuple[str, str, str, str]], note: str = "") -> None:
        self.stdout.write(f"Demo accounts (username / password / role / API token){note}:")
        for username, password, role, token in lines:
            self.stdout.write(f"  {username:<6} {password:<16} {role:<32} {token}")


def _written(site) -> bool:
    """Whether the demo was written here before: any of its pools or accounts (an admin may
    since have renamed or removed some, which a start keeps as they are)."""
    return (
        Pool.objects.filter(name__in=[pool.name for pool in site.pools]).exists()
        or User.objects.filter(username__in=[account[0] for account in ACCOUNTS]).exists()
    )


def _other_backends(site, backend: str) -> list[str]:
    """The backends the demo's pools run on, other than `backend`."""
    names = [pool.name for pool in site.pools]
    found = Pool.objects.filter(name__in=names).exclude(backend=backend)
    return sorted(set(found.values_list("backend", flat=True)))


def _demo() -> list[tuple[tuple, User]]:
    """The demo accounts that exist, each with its row of ACCOUNTS."""
    users = User.objects.in_bulk([account[0] for account in ACCOUNTS], field_name="username")
    return [(account, users[account[0]]) for account in ACCOUNTS if account[0] in users]


def _seed_catalogue(site, pools: dict[str, Pool]) -> None:
    """The demo image catalogue, on the registry the site names (SWITCHYARD_IMAGE_REGISTRY)
    or the project's own; an image is found again by its repository and tags."""
    hosts = {r.host: r for r in site.image_registries}
    own = settings.SWITCHYARD_IMAGE_REGISTRY
    registries = {}
    for host, spec in hosts.items():
        name = own if own and len(hosts) == 1 else host
        registries[host], _ = ImageRegistry.objects.update_or_create(
            host=name, defaults={"any_image": spec.any_image}
        )
    for spec in site.images:
        registry = registries[spec.registry]
        found = [
            image
            for image in CatalogueImage.objects.filter(
                registry=registry, repository=spec.repository
            )
            if list(image.tags) == list(spec.tags)
        ]
        image = found[0] if found else CatalogueImage(registry=registry, repository=spec.repository)
        image.tags = list(spec.tags)
        image.family = spec.family
        image.task_types = list(spec.task_types)
        image.default_for = list(spec.default_for)
        image.state = spec.state
        image.retire_on = spec.retire_on
        image.note = spec.note
        image.save()
        image.pools.set([pools[name] for name in spec.pools])
