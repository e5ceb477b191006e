"""Files against what a job can put in a folder: a FIFO where a file was, an upload cut short
by its client, a folder of more names than Files lists; and a helper past its deadline."""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.errors import ApplicationError
from scheduling.files import fileops
from scheduling.files.fileops import TEMP_PREFIX
from scheduling.selectors.storage import file_account, file_open, folder_get_for_user

API = "/api/v1/files"


def processes_with(token: bytes) -> list[int]:
    """The pids whose command line holds `token`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_a_fifo_swapped_in_after_the_stat_is_refused_at_once_and_no_helper_is_left(
    api, areas, monkeypatch
):
    monkeypatch.setattr(fileops, "TIMEOUT_S", 5.0)
    alice = User.objects.get(username="alice")
    folder, rest = folder_get_for_user(alice, "home", "alice/pipe")
    os.mkfifo(Path(folder.path) / "pipe")
    (Path(folder.path) / "pipe").chmod(0o666)  # alice's job account may open it
    started = time.monotonic()
    with pytest.raises(ApplicationError) as refused:
        file_open(alice, folder, rest)  # what a download does once its stat said "file"
    assert time.monotonic() - started < 3
    assert refused.value.status == 400 and "not a regular file" in str(refused.value)
    assert processes_with(folder.path.encode()) == []
    # Through the API and the page too: a clear refusal, never a hang.
    got = api.get(f"{API}/home/alice/pipe")
    assert got.status_code == 400 and set(got.json()) == {"errors"}


def test_a_helper_past_its_deadline_is_killed_not_left_behind(areas, monkeypatch):
    monkeypatch.setattr(fileops, "TIMEOUT_S", 1.0)
    alice = User.objects.get(username="alice")
    folder, _ = folder_get_for_user(alice, "home", "alice")
    mark = f"{60 + secrets.randbelow(1000)}.{secrets.randbelow(10**6):06d}"
    hangs = areas / "hanging-helper"
    hangs.write_text(f"#!/bin/sh\nexec sleep {mark}\n")  # a helper that never answers
    hangs.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(fileops.FileOpError, match="no answer within 1 s"):
        fileops.run(file_account(alice, folder), "list", folder.path, "", python=str(hangs))
    assert time.monotonic() - started < 4
    assert processes_with(f"sleep\0{mark}".encode()) == []


def test_an_upload_cut_short_leaves_the_old_file_and_no_temporary_file(api, areas):
    home = areas / "home" / "alice"
    assert api.put(f"{API}/home/alice/data", data=b"old\n", content_type="text/plain").status_code
    before = (home / "data").read_bytes()
    assert before == b"old\n"
    # The client said 10 bytes and went away after 3: the server reads 3, then nothing.
    cut = api.put(
        f"{API}/home/alice/data",
        content_type="application/octet-stream",
        CONTENT_LENGTH="10",
        **{"wsgi.input": io.BytesIO(b"new")},
    )
    assert cut.status_code == 400, cut.content
    [error] = cut.json()["errors"]
    assert error["field"] == "body"
    assert error["message"] == "upload cut short: got 3 of 10 bytes"
    assert (home / "data").read_bytes() == before
    assert not [n for n in os.listdir(home) if n.startswith(TEMP_PREFIX)]


def test_an_upload_sweeps_temporary_files_left_over_a_day_ago(api, areas):
    home = areas / "home" / "alice"
    old, new = home / f"{TEMP_PREFIX}crashed", home / f"{TEMP_PREFIX}in-flight"
    for path in (old, new):
        path.write_bytes(b"partial")
    day_and_more = time.time() - fileops.TEMP_STALE_S - 60
    os.utime(old, (day_and_more, day_and_more))
    sent = api.put(f"{API}/home/alice/x", data=b"x", content_type="text/plain")
    assert sent.status_code == 201
    assert not old.exists() and new.exists()  # one still being written is left alone


def test_a_folder_of_more_names_than_files_lists_is_cut_and_says_so(api, browser: Client, areas):
    big = areas / "home" / "alice" / "big"
    big.mkdir(mode=0o755)
    big.chmod(0o755)  # alice's job account may read it
    extra = 7
    for at in range(fileops.MAX_LISTED + extra):
        os.close(os.open(big / f"f{at:06d}", os.O_CREAT | os.O_WRONLY, 0o644))
    listed = api.get(f"{API}/home/alice/big/").json()
    assert len(listed["entries"]) == fileops.MAX_LISTED and listed["truncated"] is True
    names = [e["name"] for e in listed["entries"]]
    assert names == sorted(names)
    small = api.get(f"{API}/home/alice/").json()
    assert small["truncated"] is False
    page = browser.get("/files/home/alice/big/")
    assert page.status_code == 200
    assert f"Showing the first {fileops.MAX_LISTED} of more".encode() in page.content
    assert b'id="truncated"' not in browser.get("/files/home/alice/").content


def test_the_helper_bounds_its_own_memory_before_it_opens_a_folder(tmp_path):
    request = json.dumps({"op": "list", "root": str(tmp_path)})
    code = (
        f"import resource, socket, sys; sys.path.insert(0, {fileops.HERE!r}); import fileops; "
        f"a, b = socket.socketpair(); fileops.main(['helper', str(b.fileno()), {request!r}]); "
        "print(resource.getrlimit(resource.RLIMIT_AS)); print(a.recv(1 << 16).decode())"
    )
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-S", "-c", code], capture_output=True, text=True, timeout=20
    )
    limit, answer = done.stdout.splitlines()[:2]
    assert limit == str((fileops.MEMORY_BYTES, fileops.MEMORY_BYTES)), done.stderr
    assert json.loads(answer)  # it answered (as root here it refuses, with the limit set first)
