"""Make every project a Slurm account, with its members' cluster accounts associated to it.

Submissions also create a missing association on first use; this does it up front.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from scheduling.tasks import slurm_sync_accounts


class Command(BaseCommand):
    help = "Sync projects to Slurm accounts (sacctmgr) and members to associations."

    def add_arguments(self, parser):
        parser.add_argument("--backend", default="slurm", help="the Slurm backend's alias")

    def handle(self, *args, backend: str, **options):
        for project, users in slurm_sync_accounts(backend):
            self.stdout.write(f"{project}: {', '.join(u or '(portal user)' for u in users)}")
