"""The backfill-across-pools switch: per pair of pools, off by default, refused where the
backend cannot do it, versioned, shown on the Capacity page (docs/policy.md, "Backfill
across pools")."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from portal.models import ConfigVersion
from scheduling.decisions.borrow import Borrowing
from scheduling.models import Pool, PoolBorrowing
from scheduling.selectors import borrowing_for_backend


def test_the_demo_site_has_the_pairs_but_the_fake_backend_leaves_them_off(site):
    pairs = {(b.borrower.name, b.lender.name): b for b in PoolBorrowing.objects.all()}
    assert set(pairs) == {("cpu-hpc", "inference-agent"), ("cpu-hpc", "gpu-train")}
    assert not any(b.enabled for b in pairs.values())  # the fake backend does not backfill
    assert borrowing_for_backend("fake") == []


def test_switching_a_pair_on_is_refused_where_the_backend_cannot_and_same_pool_never(site):
    pair = PoolBorrowing.objects.get(borrower__name="cpu-hpc", lender__name="gpu-train")
    pair.enabled = True
    with pytest.raises(ValidationError) as err:
        pair.full_clean()
    assert "does not backfill across pools" in str(err.value.message_dict["enabled"])
    hpc = Pool.objects.get(name="cpu-hpc")
    with pytest.raises(ValidationError) as err:
        PoolBorrowing(borrower=hpc, lender=hpc).full_clean()
    assert "lender" in err.value.message_dict


def test_on_the_local_backend_a_pair_switched_on_reaches_the_backend_and_is_versioned(site):
    Pool.objects.update(backend="local")
    pair = PoolBorrowing.objects.get(borrower__name="cpu-hpc", lender__name="gpu-train")
    pair.enabled, pair.cpus_per_free_gpu = True, 4
    pair.full_clean()
    pair.save()
    assert borrowing_for_backend("local") == [Borrowing("cpu-hpc", "gpu-train", 4)]
    version = ConfigVersion.objects.filter(model="scheduling.poolborrowing").latest("pk")
    assert version.object_id == pair.pk
    assert version.before["enabled"] is False and version.after["enabled"] is True


def test_the_capacity_page_shows_each_pair_and_its_state(site):
    client = Client()
    client.force_login(User.objects.filter(is_superuser=True).first())
    page = client.get("/capacity/").content.decode()
    row = page[page.index('id="borrowing-cpu-hpc-gpu-train"') :].split("</tr>")[0]
    assert "<td>cpu-hpc</td><td>gpu-train</td><td>the node's own cores per GPU</td>" in row
    assert '<span class="state">off</span>' in row
    assert "/admin/scheduling/poolborrowing/" in page


def test_the_queues_page_names_the_pools_a_queues_cpu_work_may_borrow(site):
    client = Client()
    client.force_login(User.objects.filter(is_superuser=True).first())
    assert "may borrow idle cores" not in client.get("/queues/").content.decode()  # all off
    Pool.objects.update(backend="local")
    PoolBorrowing.objects.filter(lender__name="inference-agent").update(enabled=True)
    page = client.get("/queues/").content.decode()
    hpc = page[page.index("<h2>hpc ") :].split("</h2>")[0]
    assert "CPU work may borrow idle cores of inference-agent" in hpc
    assert page.count("may borrow idle cores") == 1
