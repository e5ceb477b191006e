"""The map from a directory's or an identity provider's groups to the portal's projects and
roles, and what a user's groups give them under it (docs/security.md, "LDAP").

Pure: no ORM, no settings. LDAP (group DNs) and OpenID Connect (a claim's group names) read
the same map through the same function, `access_for`; portal/directory.py writes the result.

The map is JSON: each group to a list of grants,

    {"cn=materials,ou=groups,dc=example,dc=org": ["materials:researcher"],
     "cn=materials-pi,ou=groups,dc=example,dc=org": ["materials:lead"],
     "cn=gpu-ops,ou=groups,dc=example,dc=org": ["queue-admin:gpu"],
     "cn=hpc-admins,ou=groups,dc=example,dc=org": ["platform-admin"],
     "finance-team": ["finance"]}

Group names are compared without regard to case (LDAP's DNs are).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured

# The roles of portal/roles.py, as settings name them (SWITCHYARD_2FA_REQUIRED_ROLES).
ROLE_NAMES = ("platform-admin", "queue-admin", "finance", "project-lead", "researcher")
# A project's grant: its role there → Membership.Role's value.
PROJECT_ROLES = {"lead": "pi", "researcher": "member"}

_GRANT_HELP = "platform-admin, finance, queue-admin:<queue>, <project>:lead or <project>:researcher"


@dataclass(frozen=True)
class Access:
    """What a set of groups gives: platform admin, finance, the queues administered, and the
    role in each project ("pi" beats "member")."""

    platform_admin: bool = False
    finance: bool = False
    queues: frozenset[str] = frozenset()
    projects: Mapping[str, str] = field(default_factory=dict)


GroupMap = dict[str, tuple[str, ...]]


def _grant_problem(grant: object) -> str | None:
    if not isinstance(grant, str):
        return "a string"
    if grant in ("platform-admin", "finance"):
        return None
    head, sep, tail = grant.partition(":")
    if not sep or not head or not tail:
        return _GRANT_HELP
    if head == "queue-admin" or tail in PROJECT_ROLES:
        return None
    return _GRANT_HELP


def parse_group_map(raw: str, setting: str) -> GroupMap:
    """The map from its JSON text, checked; an ImproperlyConfigured names what is wrong."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting}: expected JSON, got {raw[:80]!r} ({exc})") from None
    if not isinstance(doc, dict):
        raise ImproperlyConfigured(
            f"{setting}: expected an object of group → list of grants, got {type(doc).__name__}"
        )
    parsed: GroupMap = {}
    for group, grants in doc.items():
        if not isinstance(grants, list):
            raise ImproperlyConfigured(
                f"{setting}[{group!r}]: expected a list of grants, got {grants!r}"
            )
        for grant in grants:
            if problem := _grant_problem(grant):
                raise ImproperlyConfigured(
                    f"{setting}[{group!r}]: expected {problem}; got {grant!r}"
                )
        key = group.strip().lower()
        parsed[key] = (*parsed.get(key, ()), *grants)
    return parsed


def _grants(groups: Iterable[str], group_map: GroupMap) -> list[str]:
    wanted = {group.strip().lower() for group in groups if isinstance(group, str)}
    return [grant for group, grants in group_map.items() if group in wanted for grant in grants]


def _access(grants: Iterable[str]) -> Access:
    platform_admin = finance = False
    queues: set[str] = set()
    projects: dict[str, str] = {}
    for grant in grants:
        if grant == "platform-admin":
            platform_admin = True
        elif grant == "finance":
            finance = True
        else:
            head, _, tail = grant.partition(":")
            if head == "queue-admin":
                queues.add(tail)
            elif projects.get(head) != "pi":
                projects[head] = PROJECT_ROLES[tail]
    return Access(platform_admin, finance, frozenset(queues), projects)


def access_for(groups: Iterable[str], group_map: GroupMap) -> Access:
    """What a user in `groups` is given by the map."""
    return _access(_grants(groups, group_map))


def managed_by(group_map: GroupMap) -> Access:
    """Everything the map can give: what a login sets or takes away. Projects, queues and
    roles the map never names are left as the portal's own pages set them."""
    return _access(grant for grants in group_map.values() for grant in grants)
