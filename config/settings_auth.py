"""Settings of how users log in besides a local password: two-factor codes, the centre's LDAP
directory, and OpenID Connect single sign-on (docs/security.md: "Two-factor", "LDAP",
"Single sign-on (OIDC)").

Part of config/settings.py, which imports every name here by name. LDAP and OIDC are off
until their address is set; two-factor is on for the operators' roles in production settings.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str
from config.group_map import ROLE_NAMES, parse_group_map

# --- Two-factor (portal/twofactor.py) ---------------------------------------------------------
# The roles that must give a code from an authenticator app after their password: by default
# the operators' (platform admin, queue admin, finance) in production settings and nobody's with
# DJANGO_DEBUG=1 (the demo's accounts). An empty value turns the requirement off.
_debug = env_bool("DJANGO_DEBUG", default=False)
SWITCHYARD_2FA_REQUIRED_ROLES = env_list(
    "SWITCHYARD_2FA_REQUIRED_ROLES", [] if _debug else ["platform-admin", "queue-admin", "finance"]
)
for _role in SWITCHYARD_2FA_REQUIRED_ROLES:
    if _role not in ROLE_NAMES:
        raise ImproperlyConfigured(
            f"SWITCHYARD_2FA_REQUIRED_ROLES: expected a comma-separated list of "
            f"{', '.join(ROLE_NAMES)}; got {_role!r}"
        )
# How many recovery codes an enrolment gives (each works once).
SWITCHYARD_2FA_RECOVERY_CODES = env_int("SWITCHYARD_2FA_RECOVERY_CODES", 10)
if not 1 <= SWITCHYARD_2FA_RECOVERY_CODES <= 50:
    raise ImproperlyConfigured(
        f"SWITCHYARD_2FA_RECOVERY_CODES: expected 1 to 50, got {SWITCHYARD_2FA_RECOVERY_CODES}"
    )
# The name an authenticator app shows beside the account.
OTP_TOTP_ISSUER = env_str("SWITCHYARD_2FA_ISSUER", "Switchyard")

# --- Groups of the directory or the identity provider → projects and roles --------------------
# One map for LDAP's group DNs and OIDC's group claim alike (config/group_map.py):
# {"cn=materials,ou=groups,dc=example,dc=org": ["materials:researcher"], "ops": ["platform-admin"]}
# as JSON in SWITCHYARD_GROUP_MAP, or in a file named by SWITCHYARD_GROUP_MAP_FILE.
SWITCHYARD_GROUP_MAP = parse_group_map(
    env_str("SWITCHYARD_GROUP_MAP") or "{}", "SWITCHYARD_GROUP_MAP"
)

# --- LDAP (django-auth-ldap; portal/directory.py) --------------------------------------------
_ldap_uri = env_str("SWITCHYARD_LDAP_URI") or ""


def ldap_settings(uri: str) -> dict[str, Any]:
    """django-auth-ldap's AUTH_LDAP_* settings for the directory at `uri` from the other
    SWITCHYARD_LDAP_* settings; python-ldap is imported only when a directory is configured."""
    import ldap
    from django_auth_ldap.config import (
        GroupOfNamesType,
        GroupOfUniqueNamesType,
        LDAPSearch,
        PosixGroupType,
    )

    def required(name: str) -> str:
        value = env_str(name)
        if not value:
            raise ImproperlyConfigured(f"{name}: required with SWITCHYARD_LDAP_URI; got nothing")
        return value

    group_types = {
        "groupOfNames": GroupOfNamesType,
        "groupOfUniqueNames": GroupOfUniqueNamesType,
        "posixGroup": PosixGroupType,
    }
    group_type = env_str("SWITCHYARD_LDAP_GROUP_TYPE", "groupOfNames")
    if group_type not in group_types:
        raise ImproperlyConfigured(
            f"SWITCHYARD_LDAP_GROUP_TYPE: expected one of {', '.join(group_types)}; "
            f"got {group_type!r}"
        )
    return {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_START_TLS": env_bool("SWITCHYARD_LDAP_START_TLS", default=False),
        # Empty: an anonymous search for the user's entry.
        "AUTH_LDAP_BIND_DN": env_str("SWITCHYARD_LDAP_BIND_DN", ""),
        "AUTH_LDAP_BIND_PASSWORD": env_str("SWITCHYARD_LDAP_BIND_PASSWORD", ""),
        "AUTH_LDAP_USER_SEARCH": LDAPSearch(
            required("SWITCHYARD_LDAP_USER_BASE"),
            ldap.SCOPE_SUBTREE,
            env_str("SWITCHYARD_LDAP_USER_FILTER", "(uid=%(user)s)"),
        ),
        "AUTH_LDAP_GROUP_SEARCH": LDAPSearch(
            required("SWITCHYARD_LDAP_GROUP_BASE"),
            ldap.SCOPE_SUBTREE,
            f"(objectClass={group_type})",
        ),
        "AUTH_LDAP_GROUP_TYPE": group_types[group_type](),
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        # Names, mail and groups are read again at every login.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: env_int("SWITCHYARD_LDAP_TIMEOUT_S", 5),
            ldap.OPT_TIMEOUT: env_int("SWITCHYARD_LDAP_TIMEOUT_S", 5),
        },
    }


# --- OpenID Connect (mozilla-django-oidc; portal/sso.py) -------------------------------------
_oidc_client_id = env_str("SWITCHYARD_OIDC_CLIENT_ID") or ""
SWITCHYARD_OIDC: dict[str, Any] = {
    "enabled": bool(_oidc_client_id),
    # The name on the login page's button: "Sign in with <name>".
    "name": env_str("SWITCHYARD_OIDC_NAME", "single sign-on"),
    # Which claim names the account, and which lists its groups (SWITCHYARD_GROUP_MAP maps them).
    "username_claim": env_str("SWITCHYARD_OIDC_USERNAME_CLAIM", "preferred_username"),
    "groups_claim": env_str("SWITCHYARD_OIDC_GROUPS_CLAIM", "groups"),
}


def oidc_settings(client_id: str) -> dict[str, Any]:
    """mozilla-django-oidc's OIDC_* settings for the client `client_id` from the other
    SWITCHYARD_OIDC_* settings."""

    def required(name: str) -> str:
        value = env_str(f"SWITCHYARD_OIDC_{name}")
        if not value:
            raise ImproperlyConfigured(
                f"SWITCHYARD_OIDC_{name}: required with SWITCHYARD_OIDC_CLIENT_ID; got nothing"
            )
        return value

    return {
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": required("CLIENT_SECRET"),
        "OIDC_OP_AUTHORIZATION_ENDPOINT": required("AUTHORIZATION_ENDPOINT"),
        "OIDC_OP_TOKEN_ENDPOINT": required("TOKEN_ENDPOINT"),
        "OIDC_OP_USER_ENDPOINT": required("USERINFO_ENDPOINT"),
        "OIDC_OP_JWKS_ENDPOINT": required("JWKS_ENDPOINT"),
        "OIDC_RP_SIGN_ALGO": env_str("SWITCHYARD_OIDC_SIGN_ALGO", "RS256"),
        "OIDC_RP_SCOPES": env_str("SWITCHYARD_OIDC_SCOPES", "openid email profile"),
        "OIDC_TIMEOUT": env_int("SWITCHYARD_OIDC_TIMEOUT_S", 10),
        # Accounts are made at their first sign-in; their groups decide what they may do.
        "OIDC_CREATE_USER": True,
        # A refused sign-in goes back to the login page.
        "LOGIN_REDIRECT_URL_FAILURE": "/login/",
    }


# The backends that log in the centre's users, before Django's own (local passwords).
SWITCHYARD_LOGIN_BACKENDS = [
    *(["portal.directory.DirectoryBackend"] if _ldap_uri else []),
    *(["portal.sso.SingleSignOnBackend"] if _oidc_client_id else []),
]


def library_settings() -> dict[str, Any]:
    """django-auth-ldap's AUTH_LDAP_* and mozilla-django-oidc's OIDC_* settings, for the
    configured ones; config/settings.py adds them to its own."""
    return {
        **(ldap_settings(_ldap_uri) if _ldap_uri else {}),
        **(oidc_settings(_oidc_client_id) if _oidc_client_id else {}),
    }
