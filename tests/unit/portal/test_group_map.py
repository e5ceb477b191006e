"""The map from the centre's groups to projects and roles (config/group_map.py): checked when
the settings load, the same answer for LDAP's DNs and OIDC's group names, case aside."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.group_map import Access, access_for, managed_by, parse_group_map
from tests.unit.portal.test_production_settings import manage

MAP = {
    "cn=materials,ou=groups,dc=example,dc=org": ["materials:researcher"],
    "cn=materials-pi,ou=groups,dc=example,dc=org": ["materials:lead", "queue-admin:hpc"],
    "ops": ["platform-admin"],
    "Finance-Team": ["finance"],
}


def parsed() -> dict:
    return parse_group_map(json.dumps(MAP), "SWITCHYARD_GROUP_MAP")


def test_a_users_groups_give_the_union_of_their_grants_the_lead_role_first():
    groups = [
        "CN=Materials,ou=groups,dc=example,dc=org",
        "cn=materials-pi,ou=groups,dc=example,dc=org",
    ]
    assert access_for(groups, parsed()) == Access(
        platform_admin=False, finance=False, queues=frozenset({"hpc"}), projects={"materials": "pi"}
    )


def test_group_names_from_a_claim_read_the_same_map():
    access = access_for(["finance-team", "ops", "unknown"], parsed())
    assert access.platform_admin and access.finance
    assert access.projects == {} and access.queues == frozenset()


def test_what_the_map_manages_is_everything_it_names():
    managed = managed_by(parsed())
    assert managed.platform_admin and managed.finance
    assert managed.queues == frozenset({"hpc"}) and set(managed.projects) == {"materials"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[", "SWITCHYARD_GROUP_MAP: expected JSON"),
        ('["ops"]', "expected an object of group → list of grants, got list"),
        ('{"ops": "platform-admin"}', "SWITCHYARD_GROUP_MAP['ops']: expected a list of grants"),
        ('{"ops": ["superuser"]}', "expected platform-admin, finance, queue-admin:<queue>"),
        ('{"ops": ["materials:owner"]}', "got 'materials:owner'"),
        ('{"ops": [3]}', "expected a string; got 3"),
    ],
)
def test_a_bad_map_is_refused_with_what_was_expected_and_got(raw, message):
    with pytest.raises(ImproperlyConfigured) as error:
        parse_group_map(raw, "SWITCHYARD_GROUP_MAP")
    assert message in str(error.value)


def test_configuring_a_directory_puts_its_backend_before_local_passwords(tmp_path):
    env = {
        "DJANGO_DEBUG": "1",
        "SWITCHYARD_VAR_DIR": str(tmp_path),
        "SWITCHYARD_LDAP_URI": "ldap://127.0.0.1:1",
        "SWITCHYARD_LDAP_USER_BASE": "ou=people,dc=example,dc=org",
        "SWITCHYARD_LDAP_GROUP_BASE": "ou=groups,dc=example,dc=org",
        "SWITCHYARD_GROUP_MAP": json.dumps(MAP),
    }
    code = (
        "from django.conf import settings; print(settings.AUTHENTICATION_BACKENDS[2:]);"
        " print(settings.AUTH_LDAP_SERVER_URI, settings.AUTH_LDAP_USER_SEARCH.base_dn)"
    )
    done = manage("shell", "--no-imports", "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['portal.directory.DirectoryBackend', 'django.contrib.auth.backends.ModelBackend']",
        "ldap://127.0.0.1:1 ou=people,dc=example,dc=org",
    ]
    missing = manage("check", env={**env, "SWITCHYARD_LDAP_GROUP_BASE": ""})
    assert "SWITCHYARD_LDAP_GROUP_BASE: required with SWITCHYARD_LDAP_URI; got nothing" in (
        missing.stderr
    )
