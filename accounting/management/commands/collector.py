"""Storage and network collectors: `manage.py collector add NAME` prints its token once;
`collector list`; `collector disable NAME`; `collector storage` is the storage collector
shipped with the portal (docs/accounting.md, docs/storage.md)."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounting import storage_collector
from accounting.models import Collector
from accounting.services import collector_create
from config.env import env_str
from portal.errors import ApplicationError

DEFAULT_URL = "http://127.0.0.1:8000"


class Command(BaseCommand):
    help = "Add, list or disable the collectors that send storage and network samples; run the storage collector."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="a new collector; prints its token once")
        add.add_argument("name")
        sub.add_parser("list", help="every collector")
        off = sub.add_parser("disable", help="its token stops working")
        off.add_argument("name")
        storage = sub.add_parser(
            "storage",
            help="measure every project's and user's folder of every storage area and send "
            "the bytes to the portal, once or every period",
        )
        storage.add_argument(
            "--url",
            help=f"the portal's address (default: $SWITCHYARD_COLLECTOR_URL, else {DEFAULT_URL})",
        )
        token = storage.add_mutually_exclusive_group()
        token.add_argument("--token", help="the collector's token (`collector add NAME`)")
        token.add_argument(
            "--token-file",
            type=Path,
            help="a file holding the token (default: $SWITCHYARD_COLLECTOR_TOKEN, or the "
            "file named by $SWITCHYARD_COLLECTOR_TOKEN_FILE)",
        )
        storage.add_argument(
            "--every",
            type=int,
            default=3600,
            metavar="SECONDS",
            help="the period a sample stands for, and how often to measure (default 3600)",
        )
        storage.add_argument(
            "--once", action="store_true", help="measure and send once, then exit (for cron)"
        )
        storage.add_argument(
            "--batch",
            type=int,
            default=storage_collector.BATCH,
            help=f"samples per request (default {storage_collector.BATCH})",
        )

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
        elif action == "storage":
            self._storage(**opts)
        else:
            for c in Collector.objects.order_by("name"):
                state = "active" if c.active else "disabled"
                seen = f"last seen {c.last_seen:%Y-%m-%d %H:%M}" if c.last_seen else "never seen"
                self.stdout.write(f"{c.name}\t{c.token_prefix}…\t{state}\t{seen}")

    def _storage(self, *, url, token, token_file, every, once, batch, **_):
        if not 60 <= every <= 24 * 3600 or (24 * 3600) % every:
            raise CommandError(
                f"--every: seconds from 60 to 86400 that divide a day evenly (got {every})"
            )
        if not 1 <= batch <= 10_000:
            raise CommandError(f"--batch: from 1 to 10000 samples (got {batch})")
        url = url or env_str("SWITCHYARD_COLLECTOR_URL", DEFAULT_URL)
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise CommandError(f"--token-file: cannot read it: {exc}") from None
        token = token or (env_str("SWITCHYARD_COLLECTOR_TOKEN") or "").strip()
        if not token:
            raise CommandError(
                "no token: --token, --token-file or $SWITCHYARD_COLLECTOR_TOKEN(_FILE) "
                "(manage.py collector add NAME makes one)"
            )
        while True:
            started = time.time()
            try:
                done = storage_collector.collect(url, token, every=every, now=started, batch=batch)
            except storage_collector.SendError as exc:
                if once:
                    raise CommandError(f"samples not sent: {exc}") from None
                self.stderr.write(f"samples not sent (again next period): {exc}")
            else:
                self.stdout.write(
                    f"{done.folders} folder(s) measured ({done.missing} not made yet, "
                    f"{done.unreadable} entr(y/ies) unreadable, logged): {done.samples} sample(s), "
                    f"{done.recorded} recorded, {done.already} already"
                )
            if once:
                return
            # The next period's start: one sample per folder and period.
            time.sleep(max(1.0, storage_collector.bucket(started, every) + every - time.time()))
