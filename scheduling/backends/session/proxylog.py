"""A session's egress audit: what its tinyproxy was asked for and what it did, read from the
proxy's log (egress.py writes it to `egress.log` in the session's folder;
docs/sandbox-network.md).

tinyproxy logs each request line as it reads it ("Request (file descriptor N): GET url
HTTP/1.1"), then either a refusal (a URL its filter does not list, a CONNECT port it does not
allow, a request it cannot read) or, once the request passed, the connection it opens
("opensock: opening connection to host:port"). Its threads share the log, so a decision is
tied to the latest undecided request it names: the same URL, the same CONNECT port, the same
descriptor or the same target; requests alike get the same decision, so which of two alike
gets which line does not change the record. A request with no decision line was not passed on
(its headers could not be read, or the session ended first): it is recorded as refused.

Standard library only (the Slurm side may read logs where the portal's code is not).
"""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime, timedelta

ALLOWED = "allowed"
REFUSED = "refused"
LINE = re.compile(r"^([A-Z]+)\s+(\w{3} \d{2} \d{2}:\d{2}:\d{2}\.\d{3}) \[\d+\]: (.*)$")
REQUEST = re.compile(r"^Request \(file descriptor (\d+)\): (.*)$")
FILTERED = re.compile(r'^Proxying refused on filtered (?:url|domain) "(.*)"$')
PORT_REFUSED = re.compile(r"^Refused CONNECT method on port (\d+)$")
BAD = re.compile(r"^process_request: Bad Request on file descriptor (\d+)$")
LOCAL = re.compile(r"^transparent: destination IP \S+ is local on socket fd (\d+)$")
TRANSPARENT = re.compile(r"^process_request: trans (?:Host|IP) \S+ (\S+) for (\d+)$")
OPENING = re.compile(r"^opensock: opening connection to (.*)$")


def target_of(method: str, url: str) -> str:
    """host:port as tinyproxy reads them from a request's URL (its extract_url: the part
    before the first `/`, less anything up to an `@`, the port after the last `:`)."""
    if url.lower().startswith("http://"):
        rest, default = url[7:], 80
    elif method == "CONNECT":
        rest, default = url, 443
    else:
        return ""  # a relative URL: the target comes from a later line
    host = rest.split("/", 1)[0]
    host = host.split("@", 1)[1] if "@" in host else host
    name, colon, port = host.rpartition(":")
    if colon and "]" not in port and port[:1].isdigit():
        digits = re.match(r"\d+", port)
        return f"{name}:{int(digits.group()) if digits else default}"
    return f"{host}:{default}"


def read(path: str, *, now: datetime | None = None) -> list[dict]:
    """The audit records of the log at `path`, oldest first: time (ISO 8601, UTC), method,
    url, target (host:port), decision (ALLOWED or REFUSED) and, when refused, the reason."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return parse(text, now=now)


def read_tail(
    path: str, *, limit: int, owner: int | None = None, now: datetime | None = None
) -> list[dict]:
    """read()'s records of at most the log's last `limit` bytes (a partial first line
    dropped), for a log in a folder its session's account may write (a Slurm job's): opened
    without following a link, a regular file only and, given `owner`, that uid's (not a
    hard link to another account's file), else no records."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            return []
        cut = st.st_size > limit
        if cut:
            f.seek(st.st_size - limit)
        data = f.read(limit)
    if cut:
        data = data.partition(b"\n")[2]
    return parse(data.decode("utf-8", "replace"), now=now)


def parse(text: str, *, now: datetime | None = None) -> list[dict]:
    """read()'s records from the log's text."""
    now = now or datetime.now(UTC)
    records: list[dict] = []
    pending: list[dict] = []  # undecided, newest last

    def decide(record: dict, decision: str, reason: str = "") -> None:
        record["decision"] = decision
        if reason:
            record["reason"] = reason
        pending.remove(record)

    def latest(field: str, value: str) -> dict | None:
        return next((r for r in reversed(pending) if r.get(field) == value), None)

    for line in text.splitlines():
        found = LINE.match(line)
        if not found:
            continue
        when, message = found.group(2), found.group(3)
        if request := REQUEST.match(message):
            try:
                at = _time(when, now)
            except ValueError:  # "Feb 31": not a time the proxy wrote
                continue
            words = request.group(2).split(" ")
            method, url = words[0], words[1] if len(words) > 1 else ""
            target = target_of(method, url)
            entry: dict = {"time": at, "method": method, "url": url, "target": target}
            # What the decision lines name it by (dropped once it is decided).
            entry |= {"fd": request.group(1), "filtered_as": url}
            if method == "CONNECT":
                entry["port"] = target.rpartition(":")[2]
            records.append(entry)
            pending.append(entry)
        elif filtered := FILTERED.match(message):
            if record := latest("filtered_as", filtered.group(1)):
                decide(record, REFUSED, "not on the allow-list")
        elif refused := PORT_REFUSED.match(message):
            if record := latest("port", refused.group(1)):
                decide(record, REFUSED, f"port {refused.group(1)} is not on the allow-list")
        elif bad := BAD.match(message) or LOCAL.match(message):
            if record := latest("fd", bad.group(1)):
                decide(record, REFUSED, "not a request the proxy takes")
        elif built := TRANSPARENT.match(message):
            # A request in origin form ("GET /path" with a Host header): the URL it is
            # filtered as comes here.
            if (record := latest("fd", built.group(2))) and not record["target"]:
                record["filtered_as"] = built.group(1)
                record["target"] = target_of("GET", built.group(1))
        elif (opening := OPENING.match(message)) and (record := latest("target", opening.group(1))):
            decide(record, ALLOWED)
    for record in pending:
        record["decision"] = REFUSED
        record["reason"] = "not passed on"
    for record in records:
        for key in ("fd", "filtered_as", "port"):
            record.pop(key, None)
    return records


def _time(stamp: str, now: datetime) -> str:
    """tinyproxy's "Dec 05 10:20:16.475" (UTC: egress.py starts it with TZ=UTC, and it writes
    no year) as ISO 8601: this year's, or last year's if that would be in the future."""
    moment = datetime.strptime(f"{now.year} {stamp}", "%Y %b %d %H:%M:%S.%f").replace(tzinfo=UTC)
    if moment > now + timedelta(days=1):
        moment = moment.replace(year=now.year - 1)
    return moment.isoformat(timespec="milliseconds")
