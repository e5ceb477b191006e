"""Who may do what: the five roles of the console, as predicates (docs/console.md).

- researcher: their projects' tasks, workflows, quotas and usage;
- project lead (a project's PI): also its members, and its members' own quotas within the
  project's quota that an admin granted;
- queue admin (a queue's `admins`): edits that queue, decides its priority-raise requests,
  drains and resumes the nodes of its pool;
- finance (the `finance` group): reads usage and reports of every project, changes nothing;
- platform admin (a superuser): everything.

Pages, API and htmx fragments all ask these, through selectors that return only what the
user may see; what a user may not see does not exist for them (404).
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.utils.functional import SimpleLazyObject

FINANCE_GROUP = "finance"


def is_platform_admin(user: User) -> bool:
    return bool(user.is_authenticated and user.is_superuser)


def is_finance(user: User) -> bool:
    return bool(user.is_authenticated and user.groups.filter(name=FINANCE_GROUP).exists())


def sees_all_usage(user: User) -> bool:
    return is_platform_admin(user) or is_finance(user)


def administered_queue_ids(user: User) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(user.administered_queues.values_list("pk", flat=True))


def administers_queue(user: User, queue_id: int) -> bool:
    return is_platform_admin(user) or queue_id in administered_queue_ids(user)


def administered_pool_ids(user: User) -> set[int]:
    """The pools whose nodes a queue admin drains and resumes: those of their queues."""
    if not user.is_authenticated:
        return set()
    return set(user.administered_queues.values_list("pool_id", flat=True))


def administers_pool(user: User, pool_id: int) -> bool:
    return is_platform_admin(user) or pool_id in administered_pool_ids(user)


def is_queue_admin(user: User) -> bool:
    return bool(administered_queue_ids(user))


def leads_a_project(user: User) -> bool:
    return bool(user.is_authenticated and user.memberships.filter(role="pi").exists())


def is_researcher(user: User) -> bool:
    """A member of at least one project."""
    return bool(user.is_authenticated and user.memberships.exists())


def is_operator(user: User) -> bool:
    """A platform admin or a queue admin: who sees the operator pages (the header's links)."""
    return is_platform_admin(user) or bool(administered_queue_ids(user))


def leads_project(user: User, project) -> bool:
    if is_platform_admin(user):
        return True
    return bool(user.is_authenticated and project.memberships.filter(user=user, role="pi").exists())


# Every role, by the name the header shows, and who holds it.
ROLES = {
    "platform admin": is_platform_admin,
    "queue admin": is_queue_admin,
    "finance": is_finance,
    "project lead": leads_a_project,
    "researcher": is_researcher,
}


def role_names(user: User) -> list[str]:
    """What the user is, for the page header: every role that applies."""
    if not user.is_authenticated:
        return []
    return [name for name, holds in ROLES.items() if holds(user)]


def context(request) -> dict:
    """Template context processor: what the page header offers this user. Lazy: the htmx
    fragments polled every few seconds never read it, so they cost no query for it."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"role": SimpleLazyObject(lambda: _header(user))}


def home(user: User) -> str:
    """The page (URL name) a user lands on after logging in, where their work starts: a queue
    admin's queues (with the requests to decide), finance's usage of every project when
    finance is all they are, everyone else's tasks."""
    if is_platform_admin(user):
        return "task-list"
    if administered_queue_ids(user):
        return "queue-list"
    if is_finance(user) and not user.memberships.exists():
        return "usage"
    return "task-list"


def _header(user: User) -> dict:
    queue_admin = bool(administered_queue_ids(user))
    admin = is_platform_admin(user)
    member = admin or user.memberships.exists()
    return {
        "names": role_names(user),
        "platform_admin": admin,
        "queue_admin": queue_admin,
        "finance": is_finance(user),
        "operator": queue_admin or admin,
        # Submits work (a project to submit in): the submit, sandbox and files pages.
        "member": member,
        # Sees tasks: those of their projects, or of the queues they administer.
        "sees_tasks": member or queue_admin,
        "sees_all_usage": admin or is_finance(user),
        "home": home(user),
    }
