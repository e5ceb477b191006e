"""A slapd of a test's own: Debian's OpenLDAP server (`make ldap-deps`), started as a child
process on a free port with a configuration in a temporary folder, never the package's
service. Without slapd a test skips here and fails in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import free_port, need

SLAPD = "/usr/sbin/slapd"
SUFFIX = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "directory-admin-pass"

_CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile {folder}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_password}
directory {folder}/data
access to attrs=userPassword by anonymous auth by * none
access to * by * read
"""

_BASE = f"""\
dn: {SUFFIX}
objectClass: dcObject
objectClass: organization
o: Example centre
dc: example

dn: ou=people,{SUFFIX}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{SUFFIX}
objectClass: organizationalUnit
ou: groups
"""


@dataclass
class Directory:
    uri: str

    def ldap(self, tool: str, ldif: str) -> None:
        """Runs ldapadd or ldapmodify as the directory's admin with `ldif` on stdin."""
        command = [tool, "-x", "-H", self.uri, "-D", ROOT_DN, "-w", ROOT_PASSWORD]
        done = subprocess.run(command, input=ldif, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{tool}: {done.stderr}"


def _answers(uri: str) -> bool:
    done = subprocess.run(
        ["ldapsearch", "-x", "-H", uri, "-b", "", "-s", "base", "namingContexts"],
        capture_output=True,
        timeout=10,
    )
    return done.returncode == 0


@pytest.fixture
def slapd(tmp_path: Path) -> Iterator[Directory]:
    need("Debian's slapd and ldap-utils (make ldap-deps)", os.access(SLAPD, os.X_OK))
    need("ldapadd (ldap-utils)", shutil.which("ldapadd"))
    folder = tmp_path / "slapd"
    (folder / "data").mkdir(parents=True)
    config = folder / "slapd.conf"
    config.write_text(
        _CONFIG.format(folder=folder, suffix=SUFFIX, root_dn=ROOT_DN, root_password=ROOT_PASSWORD)
    )
    uri = f"ldap://127.0.0.1:{free_port()}"
    # -d 0: in the foreground, a child of this test, ended with it.
    server = subprocess.Popen(
        [SLAPD, "-d", "0", "-h", f"{uri}/", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not _answers(uri):
            if server.poll() is not None:
                raise AssertionError(f"slapd exited: {server.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("slapd did not answer within 20 s")
            time.sleep(0.1)
        directory = Directory(uri)
        directory.ldap("ldapadd", _BASE)
        yield directory
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
