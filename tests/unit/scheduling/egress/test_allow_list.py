"""The egress allow-list as the trusted side reads it, and the audit as it reads tinyproxy's
log (docs/sandbox-network.md). Plain functions: no proxy runs here."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest

from scheduling.backends.session import egress, network, proxylog


def test_an_allow_list_is_read_as_lower_case_names_and_ports_without_duplicates():
    got = egress.parse_allow(["PyPI.org:443", "pypi.org:443", "llm-api.example.com:8080"])
    assert got == [("pypi.org", 443), ("llm-api.example.com", 8080)]


@pytest.mark.parametrize(
    "entry",
    [
        "127.0.0.1:80",  # a raw IP
        "[::1]:443",
        "pypi.org",  # no port
        "pypi.org:0",
        "pypi.org:65536",
        "pypi.org:080",
        "*.pypi.org:443",  # a wildcard
        ".*:443",  # a pattern: the filter's rules are made from these
        "a..b:443",
        "-a.org:443",
        "pypi.org:443/",
        "pypi.org :443",
        "",
    ],
)
def test_an_entry_that_is_not_a_name_and_a_port_is_refused_naming_it(entry):
    with pytest.raises(egress.EgressError) as refused:
        egress.parse_allow([entry])
    assert repr(entry) in str(refused.value) and "host:port" in str(refused.value)


def test_the_filter_lists_each_pair_anchored_for_plain_http_and_connect():
    rules = egress.filter_rules([("pypi.org", 443), ("mirror.local", 80)]).splitlines()
    assert rules == [
        r"^http://pypi\.org:443/",
        r"^pypi\.org:443$",
        r"^http://mirror\.local(:80)?/",
        r"^mirror\.local:80$",
    ]
    config = egress.proxy_config(40000, "/s/egress.filter", [("pypi.org", 443), ("a.b", 443)])
    assert "FilterDefaultDeny Yes" in config and "Listen 127.0.0.1" in config
    assert [line for line in config.splitlines() if line.startswith("ConnectPort")] == [
        "ConnectPort 443"
    ]


@pytest.mark.parametrize(
    ("method", "url", "target"),
    [
        ("GET", "http://localhost:8080/x", "localhost:8080"),
        ("GET", "http://pypi.org/simple/", "pypi.org:80"),
        ("GET", "http://localhost:8080@127.0.0.1:9/", "127.0.0.1:9"),
        ("CONNECT", "pypi.org:443", "pypi.org:443"),
        ("CONNECT", "pypi.org", "pypi.org:443"),
        ("GET", "/relative", ""),
    ],
)
def test_the_audit_names_the_target_tinyproxy_connects_to(method, url, target):
    assert proxylog.target_of(method, url) == target


LOG = """\
CONNECT   Dec 31 23:59:59.100 [7]: Connect (file descriptor 4): 127.0.0.1
CONNECT   Dec 31 23:59:59.101 [7]: Request (file descriptor 4): GET http://a.org:81/ HTTP/1.1
CONNECT   Dec 31 23:59:59.102 [7]: Request (file descriptor 5): CONNECT b.org:443 HTTP/1.1
INFO      Dec 31 23:59:59.103 [7]: opensock: opening connection to a.org:81
INFO      Dec 31 23:59:59.104 [7]: Refused CONNECT method on port 443
CONNECT   Jan 01 00:00:00.200 [7]: Request (file descriptor 4): GET / HTTP/1.1
INFO      Jan 01 00:00:00.201 [7]: process_request: trans Host GET http://c.org:80/ for 4
NOTICE    Jan 01 00:00:00.202 [7]: Proxying refused on filtered url "http://c.org:80/"
CONNECT   Jan 01 00:00:00.300 [7]: Request (file descriptor 6): GET http://d.org:81/ HTTP/1.1
"""


def test_the_audit_reads_each_request_and_its_decision_across_a_new_year():
    records = proxylog.parse(LOG, now=datetime(2027, 1, 1, 0, 1, tzinfo=UTC))
    assert [(r["method"], r["target"], r["decision"]) for r in records] == [
        ("GET", "a.org:81", proxylog.ALLOWED),
        ("CONNECT", "b.org:443", proxylog.REFUSED),
        ("GET", "c.org:80", proxylog.REFUSED),
        ("GET", "d.org:81", proxylog.REFUSED),  # never passed on
    ]
    assert records[0]["time"] == "2026-12-31T23:59:59.101+00:00"
    assert records[2]["time"] == "2027-01-01T00:00:00.200+00:00"
    assert records[1]["reason"] == "port 443 is not on the allow-list"
    assert records[3]["reason"] == "not passed on"


def test_a_list_whose_names_lead_to_the_portals_own_services_is_refused(settings):
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    settings.SWITCHYARD_PUBLIC_URL = "http://127.0.0.1:8000"
    for entry in ("localhost:8000", "localhost:6379", f"{socket.gethostname()}:8000"):
        refusal = network.egress_refusal(["pypi.org:443", entry])
        assert refusal is not None and entry in refusal and "portal's own services" in refusal
    assert network.egress_refusal(["localhost:18081"]) is None  # another port of this host
    assert "host:port" in (network.egress_refusal(["127.0.0.1:8080"]) or "")


def test_a_log_line_with_no_real_date_is_skipped_not_the_whole_audit():
    # On a cluster the log is in a folder the session's account may write.
    forged = "CONNECT   Feb 31 10:00:00.000 [7]: Request (file descriptor 9): GET http://x.org/ HTTP/1.1\n"
    records = proxylog.parse(forged + LOG, now=datetime(2027, 1, 1, 0, 1, tzinfo=UTC))
    assert [r["target"] for r in records] == ["a.org:81", "b.org:443", "c.org:80", "d.org:81"]
