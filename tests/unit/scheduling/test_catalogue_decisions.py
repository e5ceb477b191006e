"""The image catalogue's decisions, as plain values (scheduling/decisions/catalogue.py)."""

from __future__ import annotations

from datetime import date

import pytest

from scheduling.decisions.catalogue import (
    DEPRECATED,
    RETIRED,
    Catalogue,
    ImageEntry,
    RegistryEntry,
    catalogue_check,
    entry_problem,
    host_problem,
    layer_bytes,
    platform_manifest,
    repository_problem,
    size_problem,
    tags_problem,
    types_problem,
)
from scheduling.decisions.images import ImageRefError, parse_image_ref

REG = "registry.example.org"
TODAY = date(2027, 3, 1)
DIGEST = "sha256:" + "a" * 64
TINY2 = ImageEntry(REG, "demo/tiny", "hpc-toolchain", ("2",), task_types=("hpc-simulation",))
TINY1 = ImageEntry(
    REG, "demo/tiny", "hpc-toolchain", ("1",), state=DEPRECATED, note="use demo/tiny:2"
)
AGENT = ImageEntry(
    REG, "team/agent", "agent-runtime", pools=("inference-agent",), task_types=("agent",)
)
CAT = Catalogue(registries=(RegistryEntry(REG),), images=(TINY2, TINY1, AGENT))


def check(text: str, *, catalogue=CAT, task_type="hpc-simulation", pool="cpu-hpc", today=TODAY):
    ref = parse_image_ref(text, default_registry=REG)
    return catalogue_check(
        ref, catalogue=catalogue, task_type=task_type, pool=pool, today=today, got=text
    )


def refused(text: str, **kwargs) -> ImageRefError:
    with pytest.raises(ImageRefError) as caught:
        check(text, **kwargs)
    assert caught.value.field == "image" and caught.value.got == text
    return caught.value


def test_a_listed_tag_for_its_type_and_pool_is_allowed_without_a_warning():
    verdict = check("demo/tiny:2")
    assert verdict.entry == TINY2 and verdict.warning is None and not verdict.digest_of_tag


def test_an_empty_catalogue_allows_no_image_and_says_so():
    error = refused("demo/tiny:2", catalogue=Catalogue())
    assert "allows no registry yet" in error.message


def test_a_registry_not_in_the_catalogue_is_refused_naming_the_allowed_ones():
    error = refused("other.example.org/demo/tiny:2")
    assert f"expected an image from {REG}" in error.message
    assert "not from other.example.org" in error.message


def test_an_image_not_in_the_catalogue_is_refused_listing_what_is_allowed():
    error = refused("demo/absent:1")
    assert f"{REG}/demo/absent is not in it" in error.message
    assert f"allowed for hpc-simulation tasks on pool cpu-hpc: {REG}/demo/tiny:2" in error.message
    # The agent image is not for HPC tasks: not offered.
    assert "team/agent" not in error.message


def test_a_tag_the_catalogue_does_not_list_is_refused_naming_the_listed_tags():
    error = refused("demo/tiny:3")
    assert "expected a tag of registry.example.org/demo/tiny the catalogue lists (1, 2)" in (
        error.message
    )


def test_a_registry_that_allows_any_image_lets_an_unlisted_one_through():
    cat = Catalogue(registries=(RegistryEntry(REG, any_image=True),), images=(TINY2,))
    assert check("demo/absent:1", catalogue=cat).entry is None
    # ...but a listed image keeps its own rules: demo/tiny:2 is for HPC tasks only.
    error = refused("demo/tiny:2", catalogue=cat, task_type="agent")
    assert "is for hpc-simulation tasks" in error.message


def test_an_image_for_other_types_or_pools_is_refused():
    error = refused("team/agent:1", task_type="sandbox", pool="inference-agent")
    assert "expected an image for sandbox tasks" in error.message
    error = refused("team/agent:1", task_type="agent", pool="cpu-hpc")
    assert "expected an image pool cpu-hpc may run" in error.message
    assert "is for pool(s) inference-agent" in error.message
    assert check("team/agent:1", task_type="agent", pool="inference-agent").entry == AGENT


def test_a_deprecated_image_is_accepted_with_a_warning_until_its_retire_date():
    verdict = check("demo/tiny:1")
    assert verdict.warning == f"image {REG}/demo/tiny:1 is deprecated: use demo/tiny:2"
    dated = ImageEntry(REG, "old/tool", "hpc-toolchain", state=DEPRECATED, retire_on=TODAY)
    cat = Catalogue(registries=(RegistryEntry(REG),), images=(dated,))
    day_before = date(2027, 2, 28)
    verdict = check("old/tool:1", catalogue=cat, today=day_before)
    assert verdict.warning is not None and "refused from 2027-03-01" in verdict.warning
    error = refused("old/tool:1", catalogue=cat, today=TODAY)
    assert "was retired on 2027-03-01" in error.message


def test_a_retired_image_is_refused():
    retired = ImageEntry(REG, "old/tool", "hpc-toolchain", state=RETIRED, note="gone")
    cat = Catalogue(registries=(RegistryEntry(REG),), images=(retired, TINY2))
    error = refused("old/tool:7", catalogue=cat)
    assert "expected an image in service" in error.message and "(gone)" in error.message
    assert f"{REG}/demo/tiny:2" in error.message  # what to use instead


def test_a_digest_on_a_tag_listed_image_must_be_checked_against_the_tag():
    assert check(f"demo/tiny:2@{DIGEST}").digest_of_tag
    # A digest alone names no tag the catalogue lists.
    error = refused(f"demo/tiny@{DIGEST}")
    assert "not a digest without a tag" in error.message
    anytag = Catalogue(registries=(RegistryEntry(REG),), images=(AGENT,))
    verdict = check(
        f"team/agent@{DIGEST}", catalogue=anytag, task_type="agent", pool="inference-agent"
    )
    assert verdict.entry == AGENT and not verdict.digest_of_tag


def test_the_default_image_is_the_one_for_the_type_on_the_pool():
    default = ImageEntry(
        REG, "team/agent", "agent-runtime", ("5",), pools=("p1",), default_for=("agent",)
    )
    cat = Catalogue(registries=(RegistryEntry(REG),), images=(TINY2, default))
    assert cat.default_for("agent", "p1") == default
    assert default.default_reference == f"{REG}/team/agent:5"
    assert cat.default_for("agent", "p2") is None
    assert cat.default_for("sandbox", "p1") is None


def test_a_refusal_lists_at_most_a_few_images():
    many = tuple(ImageEntry(REG, f"lib/n{i}", "hpc-toolchain", ("1",)) for i in range(20))
    cat = Catalogue(registries=(RegistryEntry(REG),), images=many)
    error = refused("lib/absent:1", catalogue=cat)
    assert "and 12 more (GET /api/v1/images/)" in error.message


def test_size_limits_are_per_pool():
    assert size_problem(10, pool="a", limits={"a": 10}) is None
    assert size_problem(10**12, pool="b", limits={"a": 10}) is None
    problem = size_problem(11, pool="a", limits={"a": 10})
    assert problem == (
        "expected an image of at most 10 bytes on pool a (its layers, compressed); this one is 11"
    )


def test_layer_bytes_adds_the_manifests_layers_and_an_index_names_its_platforms():
    manifest = {"config": {"size": 99}, "layers": [{"size": 3}, {"size": 4}]}
    assert layer_bytes(manifest) == 7
    index = {
        "manifests": [
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert layer_bytes(index) is None
    assert platform_manifest(index, arch="amd64") == "sha256:amd"
    assert platform_manifest(index, arch="s390x") is None


def test_what_an_admin_writes_is_checked():
    assert host_problem("127.0.0.1:15000") is None
    assert host_problem("not a host") is not None
    assert repository_problem(REG, "hpc/gromacs") is None
    assert repository_problem(REG, "hpc/gromacs:1") is not None
    assert repository_problem(REG, "Hpc") is not None
    assert tags_problem([]) is None and tags_problem(["1", "2024.1"]) is None
    assert tags_problem(["-1"]) is not None and tags_problem(["1", "1"]) is not None
    assert tags_problem("1") is not None
    assert types_problem(["agent"], ("agent", "sandbox")) is None
    assert types_problem(["gpu"], ("agent",)) is not None


def test_entries_must_not_overlap_or_claim_a_default_twice():
    assert entry_problem(TINY2, [TINY1, AGENT]) is None
    again = ImageEntry(REG, "demo/tiny", "hpc-toolchain", ("2", "3"))
    assert entry_problem(again, [TINY2]) == (
        "tags",
        f"{TINY2.shown} already lists 2 of {REG}/demo/tiny",
    )
    anytag = ImageEntry(REG, "team/agent", "agent-runtime")
    assert entry_problem(anytag, [AGENT])[0] == "tags"
    first = ImageEntry(REG, "a/b", "agent-runtime", ("1",), default_for=("agent",))
    second = ImageEntry(REG, "c/d", "agent-runtime", ("1",), default_for=("agent",))
    assert entry_problem(second, [first])[0] == "default_for"
    no_tag = ImageEntry(REG, "c/d", "agent-runtime", default_for=("agent",))
    assert entry_problem(no_tag, [])[0] == "tags"
    wrong_type = ImageEntry(
        REG, "c/d", "agent-runtime", ("1",), task_types=("sandbox",), default_for=("agent",)
    )
    assert entry_problem(wrong_type, [])[0] == "default_for"
    dated = ImageEntry(REG, "c/d", "agent-runtime", retire_on=TODAY)
    assert entry_problem(dated, [])[0] == "retire_on"
