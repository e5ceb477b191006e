"""Logging in as the centre's users against a real slapd (tests/integration/ldap_server.py):
the login page's own form, django-auth-ldap's bind and group search, and the group map
applied at every login — projects and roles given, then taken away when the directory
changes; a local password still works beside it."""

from __future__ import annotations

import json

import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.shortcuts import resolve_url
from django.test import Client
from knox.models import AuthToken

from config.group_map import parse_group_map
from config.settings_auth import ldap_settings
from portal import roles
from portal.models import AuditEvent, Membership, Project
from scheduling.models import Queue
from tests.integration.ldap_server import SUFFIX, Directory, slapd  # noqa: F401 - a fixture

pytestmark = pytest.mark.integration

PEOPLE, GROUPS = f"ou=people,{SUFFIX}", f"ou=groups,{SUFFIX}"
GROUP_MAP = {
    f"cn=materials-users,{GROUPS}": ["materials:researcher"],
    f"cn=genomics-users,{GROUPS}": ["genomics:researcher"],
    f"CN=Climate-Leads,{GROUPS}": ["climate:lead"],  # DNs compare without case
    f"cn=hpc-ops,{GROUPS}": ["queue-admin:hpc"],
    f"cn=platform-ops,{GROUPS}": ["platform-admin"],
    f"cn=finance-team,{GROUPS}": ["finance"],
}


def person(uid: str, password: str, given: str, surname: str) -> str:
    return f"""\
dn: uid={uid},{PEOPLE}
objectClass: inetOrgPerson
uid: {uid}
cn: {given} {surname}
givenName: {given}
sn: {surname}
mail: {uid}@example.org
userPassword: {password}

"""


def group(name: str, *members: str) -> str:
    # groupOfNames needs one member at least: an entry nobody logs in as keeps each non-empty.
    lines = "".join(f"member: uid={uid},{PEOPLE}\n" for uid in ("nobody", *members))
    return f"dn: cn={name},{GROUPS}\nobjectClass: groupOfNames\ncn: {name}\n{lines}\n"


def membership_change(name: str, op: str, uid: str) -> str:
    return f"dn: cn={name},{GROUPS}\nchangetype: modify\n{op}: member\nmember: uid={uid},{PEOPLE}\n"


@pytest.fixture
def directory(slapd: Directory, site, settings, monkeypatch) -> Directory:  # noqa: F811
    """The site's login through the directory, configured as an operator would: the
    SWITCHYARD_LDAP_* variables read by config/settings_auth.py."""
    slapd.ldap(
        "ldapadd",
        person("carol", "carol-ldap-pass", "Carol", "Chen")
        + person("dave", "dave-ldap-pass", "Dave", "Diaz")
        + group("materials-users", "carol")
        + group("genomics-users", "dave")
        + group("climate-leads", "dave")
        + group("hpc-ops", "carol")
        + group("platform-ops", "dave")
        + group("finance-team", "dave"),
    )
    monkeypatch.setenv("SWITCHYARD_LDAP_USER_BASE", PEOPLE)
    monkeypatch.setenv("SWITCHYARD_LDAP_GROUP_BASE", GROUPS)
    monkeypatch.setenv("SWITCHYARD_LDAP_BIND_DN", "")  # anonymous search, as slapd allows here
    for name, value in ldap_settings(slapd.uri).items():
        setattr(settings, name, value)
    monkeypatch.setenv("SWITCHYARD_LDAP_URI", slapd.uri)
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.auth.UsernamePace",
        "portal.directory.DirectoryBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    settings.SWITCHYARD_GROUP_MAP = parse_group_map(json.dumps(GROUP_MAP), "test")
    return slapd


def log_in(username: str, password: str) -> tuple[Client, object]:
    client = Client()
    return client, client.post("/login/", {"username": username, "password": password})


def projects_of(username: str) -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("project__slug", "role")
    )


def test_a_directory_user_logs_in_on_the_page_with_the_groups_mapped(directory):
    client, answer = log_in("carol", "carol-ldap-pass")
    assert answer.status_code == 302
    assert answer["Location"] == resolve_url(django_settings.LOGIN_REDIRECT_URL)
    assert client.get("/").status_code == 200
    carol = User.objects.get(username="carol")
    assert (carol.email, carol.first_name, carol.last_name) == (
        "carol@example.org",
        "Carol",
        "Chen",
    )
    assert not carol.has_usable_password()  # the directory checks her password, never the portal
    assert projects_of("carol") == {"materials": "member"}
    assert Queue.objects.get(name="hpc").admins.filter(pk=carol.pk).exists()
    assert set(roles.role_names(carol)) == {"queue admin", "researcher"}
    assert AuditEvent.objects.filter(
        action="member.add", project="materials", detail__source="ldap"
    ).exists()

    _, dave_answer = log_in("dave", "dave-ldap-pass")
    assert dave_answer.status_code == 302
    dave = User.objects.get(username="dave")
    assert dave.is_superuser and dave.is_staff and roles.is_finance(dave)
    assert projects_of("dave") == {"genomics": "member", "climate": "pi"}


def test_the_next_login_applies_the_directory_as_it_is_then(directory):
    log_in("carol", "carol-ldap-pass")
    carol = User.objects.get(username="carol")
    # A project the map never names is the portal's to manage: left alone.
    oceans = Project.objects.create(
        slug="oceans", name="Oceans", pi=User.objects.get(username="alice")
    )
    Membership.objects.create(user=carol, project=oceans)
    directory.ldap(
        "ldapmodify",
        membership_change("materials-users", "delete", "carol")
        + "\n"
        + membership_change("genomics-users", "add", "carol")
        + "\n"
        + membership_change("hpc-ops", "delete", "carol")
        + "\n"
        + membership_change("platform-ops", "add", "carol"),
    )
    _, answer = log_in("carol", "carol-ldap-pass")
    assert answer.status_code == 302
    carol.refresh_from_db()
    assert projects_of("carol") == {"genomics": "member", "oceans": "member"}
    assert not Queue.objects.get(name="hpc").admins.filter(pk=carol.pk).exists()
    assert carol.is_superuser
    assert AuditEvent.objects.filter(
        action="member.remove", project="materials", target="user carol", detail__source="ldap"
    ).exists()


def test_a_wrong_directory_password_fails_like_any_and_is_counted(directory):
    _, answer = log_in("carol", "not-her-password")
    assert answer.status_code == 200
    assert b"did not match" in answer.content
    assert not User.objects.filter(username="carol").exists()
    assert AccessAttempt.objects.get(username="carol").failures_since_start == 1


def test_local_passwords_still_work_beside_the_directory(directory):
    _, answer = log_in("alice", "alice-demo-pass")
    assert answer.status_code == 302
    assert projects_of("alice") == {"materials": "pi", "climate": "pi"}


def test_a_directory_account_switched_off_loses_its_session_and_gets_no_token(directory):
    client, _ = log_in("carol", "carol-ldap-pass")
    assert client.get("/").status_code == 200
    User.objects.filter(username="carol").update(is_active=False)
    assert client.get("/").status_code == 302  # the session is over
    _, answer = log_in("carol", "carol-ldap-pass")
    assert answer.status_code == 200  # the login page again, not a login
    token = Client().post(
        "/api/v1/auth/token/",
        {"username": "carol", "password": "carol-ldap-pass"},
        content_type="application/json",
    )
    assert token.status_code == 400
    assert not AuthToken.objects.filter(user__username="carol").exists()
