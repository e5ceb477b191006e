"""Show and change quotas: `manage.py quota list`, `quota set`, `quota delete` (docs/policy.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from portal.errors import ApplicationError
from portal.models import Project
from scheduling.selectors.quota import project_quotas
from scheduling.services.quotas import UNCHANGED, quota_delete, quota_set


class Command(BaseCommand):
    help = "List, set or delete project (and per-user) quotas."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        show = sub.add_parser("list", help="every quota with its limit and current use")
        show.add_argument("--project")
        change = sub.add_parser("set", help="create or change one quota")
        drop = sub.add_parser("delete", help="remove one quota")
        for p in (change, drop):
            p.add_argument("project")
            p.add_argument("queue")
            p.add_argument("resource", choices=["gpus", "cpus", "tasks", "gpu_hours", "core_hours"])
            p.add_argument("--user", help="a member: the quota is theirs alone")
        change.add_argument("limit", type=int)
        change.add_argument("--over-quota", choices=["queue", "reject"], default="queue")
        change.add_argument(
            "--period",
            choices=["day", "week", "month"],
            default="month",
            help="a GPU-hours or core-hours budget's period",
        )
        change.add_argument(
            "--borrowing-limit",
            type=int,
            help="how far over its limit the project may go on other projects' unused quota "
            "in the queue (0: never; left out: as it is)",
        )
        change.add_argument(
            "--lending-limit",
            help="how much of its unused quota other projects may borrow: a number, or 'all' "
            "(left out: as it is)",
        )

    def handle(self, *args, action: str, **opts):
        try:
            if action == "set":
                quota = quota_set(
                    project=opts["project"],
                    queue=opts["queue"],
                    resource=opts["resource"],
                    limit=opts["limit"],
                    over_quota=opts["over_quota"],
                    user=opts["user"],
                    period=opts["period"],
                    borrowing_limit=_given(opts["borrowing_limit"]),
                    lending_limit=_lending(opts["lending_limit"]),
                )
                self.stdout.write(f"set: {quota}")
            elif action == "delete":
                gone = quota_delete(
                    project=opts["project"],
                    queue=opts["queue"],
                    resource=opts["resource"],
                    user=opts["user"],
                )
                if not gone:
                    raise CommandError("no such quota")
                self.stdout.write("deleted")
            else:
                projects = Project.objects.order_by("slug")
                if opts["project"]:
                    projects = projects.filter(slug=opts["project"])
                for project in projects:
                    for row in project_quotas(project):
                        action_text = " (over it: refused)" if row["over_quota"] == "reject" else ""
                        self.stdout.write(f"{row['text']}{action_text}")
        except ApplicationError as exc:
            raise CommandError(f"{exc.errors[0].field}: {exc}") from None


def _given(value):
    return UNCHANGED if value is None else value


def _lending(value: str | None):
    if value is None:
        return UNCHANGED
    if value == "all":
        return None
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"--lending-limit: a whole number or 'all', got {value!r}") from None
