"""Make every project a Slurm account, with its members' cluster accounts associated to it.

Submissions also create a missing association on first use; this does it up front.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from portal.models import ClusterAccount, Membership, Project
from scheduling.backends import get_backend


class Command(BaseCommand):
    help = "Sync projects to Slurm accounts (sacctmgr) and members to associations."

    def add_arguments(self, parser):
        parser.add_argument("--backend", default="slurm", help="the Slurm backend's alias")

    def handle(self, *args, backend: str, **options):
        slurm = get_backend(backend)
        accounts = dict(ClusterAccount.objects.values_list("user_id", "unix_username"))
        for project in Project.objects.order_by("slug"):
            users = {
                accounts.get(m.user_id) or slurm.service_account
                for m in Membership.objects.filter(project=project)
            }
            for unix_user in sorted(users, key=lambda u: u or ""):
                slurm.ensure_association(project.slug, unix_user)
            self.stdout.write(f"{project.slug}: {', '.join(u or '(portal user)' for u in users)}")
