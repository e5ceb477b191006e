"""Storage and network collectors: `manage.py collector add NAME` prints its token once;
`collector list`; `collector disable NAME` (docs/accounting.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from accounting.models import Collector
from accounting.services import collector_create
from portal.errors import ApplicationError


class Command(BaseCommand):
    help = "Add, list or disable the collectors that send storage and network samples."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="a new collector; prints its token once")
        add.add_argument("name")
        sub.add_parser("list", help="every collector")
        off = sub.add_parser("disable", help="its token stops working")
        off.add_argument("name")

    def handle(self, *args, action: str, **opts):
        if action == "add":
            try:
                collector, token = collector_create(opts["name"])
            except ApplicationError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"collector {collector.name}: send samples with\n"
                f"  Authorization: Collector {token}\n(the token is not shown again)"
            )
        elif action == "disable":
            if not Collector.objects.filter(name=opts["name"]).update(active=False):
                raise CommandError("no such collector")
            self.stdout.write(f"collector {opts['name']} disabled")
        else:
            for c in Collector.objects.order_by("name"):
                state = "active" if c.active else "disabled"
                seen = f"last seen {c.last_seen:%Y-%m-%d %H:%M}" if c.last_seen else "never seen"
                self.stdout.write(f"{c.name}\t{c.token_prefix}…\t{state}\t{seen}")
