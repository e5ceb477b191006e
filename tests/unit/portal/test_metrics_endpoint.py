"""`/metrics`: who may scrape it, and what a scrape reads from the database and the broker."""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from accounting.models import Reconciliation
from config.metrics.broker import folder_lengths, redis_keys
from scheduling.models import Attempt, Task
from tests.conftest import descriptor, submit

PROXY = "10.0.0.2"


def scrape(client: Client, peer: str = "127.0.0.1", **headers):
    return client.get("/metrics", REMOTE_ADDR=peer, **headers)


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in an exposition, or None when it is absent."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if line.startswith(name + " ") or found == labels:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_loopback_may_scrape_and_any_other_address_is_refused(site):
    client = Client()
    assert scrape(client).status_code == 200
    assert scrape(client, "::1").status_code == 200
    assert scrape(client, "::ffff:127.0.0.1").status_code == 200  # IPv4 over an IPv6 socket
    assert scrape(client, "127.0.0.2").status_code == 403  # loopback is 127.0.0.1 and ::1
    refused = scrape(client, "10.1.2.3")
    assert refused.status_code == 403
    assert b"SWITCHYARD_METRICS_ALLOW" in refused.content


def test_an_allowed_network_may_scrape(site, settings):
    settings.SWITCHYARD_METRICS_ALLOW = [ipaddress.ip_network("10.1.0.0/16")]
    assert scrape(Client(), "10.1.2.3").status_code == 200
    assert scrape(Client(), "10.2.0.1").status_code == 403


def test_the_scrape_token_opens_it_from_anywhere_and_a_wrong_one_does_not(site, settings):
    settings.SWITCHYARD_METRICS_TOKEN = "s3cret-scrape-token"
    good = {"HTTP_AUTHORIZATION": "Bearer s3cret-scrape-token"}
    assert scrape(Client(), "192.0.2.7", **good).status_code == 200
    bad = {"HTTP_AUTHORIZATION": "Bearer s3cret-scrape-tokem"}
    assert scrape(Client(), "192.0.2.7", **bad).status_code == 403
    assert scrape(Client(), "192.0.2.7", HTTP_AUTHORIZATION="Token x").status_code == 403


def test_the_admin_pages_allow_list_neither_opens_nor_closes_metrics(site, settings):
    settings.SWITCHYARD_ADMIN_ALLOW = [ipaddress.ip_network("10.9.0.0/16")]
    assert scrape(Client(), "10.9.0.1").status_code == 403
    assert scrape(Client()).status_code == 200


def test_no_token_is_accepted_when_none_is_set(site, settings):
    settings.SWITCHYARD_METRICS_TOKEN = ""
    assert scrape(Client(), "192.0.2.7", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_behind_a_trusted_proxy_the_forwarded_client_is_checked(site, settings):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network(PROXY)]
    settings.SWITCHYARD_METRICS_ALLOW = [ipaddress.ip_network(PROXY)]
    client = Client()
    assert scrape(client, PROXY, HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    assert scrape(client, PROXY, HTTP_X_FORWARDED_FOR="10.0.0.2").status_code == 200


def test_a_client_cannot_claim_loopback_with_a_forwarding_header(site):
    assert scrape(Client(), "203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403


def test_metrics_off_is_a_404(site, settings):
    settings.SWITCHYARD_METRICS = False
    assert scrape(Client()).status_code == 404


def test_a_scrape_reads_tasks_nodes_pools_and_the_broker(site, api):
    # A small task without a type is an agent, routed to inference-agent at level high.
    assert submit(api, descriptor(name="waits")).status_code == 201
    text = scrape(Client()).content.decode()
    waiting = {"queue": "inference-agent", "level": "high", "state": "waiting"}
    assert sample(text, "switchyard_tasks", **waiting) == 1
    oldest = sample(
        text, "switchyard_oldest_waiting_seconds", queue="inference-agent", type="agent"
    )
    assert oldest is not None and 0 <= oldest < 60
    assert sample(text, "switchyard_nodes", pool="cpu-hpc", state="up") == 5
    assert sample(text, "switchyard_pool_cpus", pool="cpu-hpc", measure="total") == 320
    assert sample(text, "switchyard_pool_gpus", pool="gpu-train", measure="up") == 160
    assert sample(text, "switchyard_pool_gpus", pool="gpu-train", measure="allocated") == 0
    assert sample(text, "switchyard_celery_queue_length", queue="celery") is not None
    assert sample(text, "switchyard_metering_lag_seconds") == 0
    for part in ("tasks", "sandboxes", "broker", "accounting"):
        assert sample(text, "switchyard_scrape_failed", part=part) == 0
    submitted = {"type": "agent", "queue": "inference-agent"}
    assert sample(text, "switchyard_tasks_submitted_total", **submitted) >= 1


def test_tasks_of_two_types_in_one_queue_and_level_are_one_series(site, api):
    # Prometheus refuses a whole scrape that holds a series twice.
    ids = [submit(api, descriptor(name=f"t{i}")).json()["id"] for i in range(3)]
    Task.objects.filter(pk=ids[0]).update(type="ai-inference")
    text = scrape(Client()).content.decode()
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    assert len(series) == len(set(series))
    waiting = {"queue": "inference-agent", "level": "high", "state": "waiting"}
    assert sample(text, "switchyard_tasks", **waiting) == 3
    inference = {"queue": "inference-agent", "type": "ai-inference"}
    assert sample(text, "switchyard_oldest_waiting_seconds", **inference) is not None


def test_a_scrape_reads_the_gpus_measured_in_use_per_pool_beside_those_allocated(site, api):
    # A training that held 4 GPUs for the last half hour, measured using 2 of them.
    resources = {"cpus": 8, "memory": "8Gi", "gpus": 4}
    doc = descriptor(name="train", type="ai-training", resources=resources, estimate="5m")
    answer = submit(api, doc)
    assert answer.status_code == 201, answer.json()
    task = Task.objects.get(pk=answer.json()["id"])
    now = timezone.now()
    Attempt.objects.create(
        task=task,
        number=1,
        key="k-gpu",
        state="succeeded",
        started_at=now - timedelta(minutes=30),
        ended_at=now - timedelta(seconds=1),
        gpu_samples=180,
        gpu_busy=2,
        gpu_util_mean=40.0,
    )
    pool = task.queue.pool.name
    text = scrape(Client()).content.decode()
    used = sample(text, "switchyard_pool_gpus", pool=pool, measure="used_last_hour")
    assert used is not None and 0.98 <= used <= 1.0  # 2 GPUs for half of the hour
    assert sample(text, "switchyard_pool_gpus", pool="cpu-hpc", measure="used_last_hour") == 0


def test_a_scrape_reads_the_metering_lag_and_each_backends_last_reconciliation(site, api):
    now = timezone.now()
    task = Task.objects.get(pk=submit(api, descriptor()).json()["id"])
    ended = now - timedelta(minutes=40)
    Attempt.objects.create(task=task, number=1, key="k-lag", state="succeeded", ended_at=ended)
    window = {"period_start": now - timedelta(hours=2), "period_end": now, "tolerance": 0}
    Reconciliation.objects.create(backend="slurm", outcome="clean", **window)
    Reconciliation.objects.create(backend="slurm", outcome="differences", missing=2, **window)
    Reconciliation.objects.create(backend="local", outcome="clean", **window)
    text = scrape(Client()).content.decode()
    assert 40 * 60 <= sample(text, "switchyard_metering_lag_seconds") < 41 * 60
    assert sample(text, "switchyard_metering_backlog_attempts") == 1
    outcome = "switchyard_reconciliation_outcome"
    assert sample(text, outcome, backend="slurm", outcome="differences") == 1
    assert sample(text, outcome, backend="slurm", outcome="clean") == 0
    assert sample(text, outcome, backend="local", outcome="clean") == 1
    assert sample(text, "switchyard_reconciliation_differences", backend="slurm") == 2


def test_the_filesystem_broker_is_counted_by_queue(tmp_path):
    for name in ("1_a.celery.msg", "2_b.celery.msg", "3_c.periodic.msg", "4_d.celery.msg.partial"):
        (tmp_path / name).write_text("{}")
    assert folder_lengths(tmp_path, ["celery", "periodic"]) == {"celery": 2, "periodic": 1}
    assert folder_lengths(tmp_path / "none", ["celery"]) == {"celery": 0}


def test_redis_queues_are_read_with_their_priority_lists():
    assert redis_keys("celery") == [
        "celery",
        "celery\x06\x163",
        "celery\x06\x166",
        "celery\x06\x169",
    ]
