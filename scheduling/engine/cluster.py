"""The Slurm cluster's accounts as the portal describes them.

For `manage.py slurm_sync_accounts`, which reaches the Slurm backend through its Celery task
(`scheduling/tasks.py`). The config files are pure rendering: `scheduling/sites/slurm.py`.
"""

from __future__ import annotations

from portal.models import ClusterAccount, Membership, Project
from scheduling.backends import BackendError
from scheduling.engine.registry import get_backend

__all__ = ["sync_accounts"]


def sync_accounts(alias: str) -> list[tuple[str, list[str | None]]]:
    """Make every project a Slurm account with its members' Unix accounts associated, and
    its fair-share shares the account's Fairshare.

    Returns (project, Unix users) in project order; None stands for the portal's own user.
    """
    slurm = get_backend(alias).cluster_accounts()
    if slurm is None:
        raise BackendError(f"backend {alias!r} has no cluster accounts: it is not a Slurm backend")
    accounts = dict(ClusterAccount.objects.values_list("user_id", "unix_username"))
    done = []
    for project in Project.objects.order_by("slug"):
        users = {
            accounts.get(m.user_id) or slurm.service_account
            for m in Membership.objects.filter(project=project)
        }
        ordered = sorted(users, key=lambda u: u or "")
        for unix_user in ordered:
            slurm.ensure_association(project.slug, unix_user)
        slurm.set_account_share(project.slug, project.share)
        done.append((project.slug, ordered))
    return done
