"""Credentials anyone could know (config/credentials.py): the decision, without a process."""

from __future__ import annotations

from urllib.parse import urlsplit

import dj_database_url
import pytest

from config.credentials import credential_problems, with_password


@pytest.mark.parametrize(
    ("database_url", "redis_url", "refused"),
    [
        ("postgres://switchyard:switchyard@db/switchyard", None, "project has shipped"),
        ("postgres://switchyard:switchyard@127.0.0.1/switchyard", None, "project has shipped"),
        ("postgres://switchyard@db.example.org/sy", None, "without a password"),
        ("sqlite:////var/lib/switchyard/db.sqlite3", "redis://:switchyard@redis:6379/0", "shipped"),
        ("sqlite:////x.sqlite3", "redis://redis:6379/0", "Redis on redis is reached without"),
    ],
)
def test_it_names_credentials_anyone_could_know(database_url, redis_url, refused):
    problems = credential_problems(dj_database_url.parse(database_url), redis_url)
    assert len(problems) == 1 and refused in problems[0], problems


@pytest.mark.parametrize(
    ("database_url", "redis_url"),
    [
        ("postgres://postgres@127.0.0.1:5432/switchyard", "redis://127.0.0.1:6379/15"),
        ("postgres://sy@localhost/sy", "redis://[::1]:6379/0"),
        ("postgres://sy@%2Fvar%2Frun%2Fpostgresql/sy", "unix:///run/redis.sock"),
        ("postgres://sy:a-long-new-one@db/sy", "rediss://:another-one@redis:6380/0"),
        ("postgres://sy@db/sy?sslcert=/run/secrets/client.crt", None),
    ],
)
def test_local_or_other_credentials_pass(database_url, redis_url):
    assert credential_problems(dj_database_url.parse(database_url), redis_url) == []


def test_a_password_kept_apart_goes_into_a_url_that_has_none():
    url = with_password("redis://redis:6379/0", "p@ss/w:rd")
    assert urlsplit(url).hostname == "redis" and urlsplit(url).port == 6379
    assert urlsplit(url).password == "p%40ss%2Fw%3Ard"
    assert with_password("redis://:own@redis/0", "other") == "redis://:own@redis/0"
    assert with_password("redis://redis/0", None) == "redis://redis/0"
