"""No two projects share a Unix group: a long slug's group name is shortened with a hash, and
the shape it is shortened to is refused as a slug (docs/storage.md)."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from portal.models import Project
from scheduling.decisions.storage import project_group, project_slug_problem
from scheduling.files import folders


def test_the_shortened_shape_is_reserved():
    long = "materials-science-group-a"
    shortened = project_group(long).removeprefix("sy-project-")
    assert shortened == "materials-sc-" + hashlib.sha256(long.encode()).hexdigest()[:8]
    assert project_slug_problem(shortened) is not None  # it would name the long one's group
    for slug in ("materials", "materials-sc-3963a79", "materials-sc-3963a79g", long, "a" * 21):
        assert project_slug_problem(slug) is None, slug
    assert folders.project_group is project_group  # the worker names groups the same way


def test_the_slugs_a_project_may_have_name_distinct_groups():
    slugs = [f"{w}-{n}" for w in ("x", "materials-science", "a" * 40) for n in range(200)]
    slugs += ["materials-science-group-a", "materials-sc"]
    kept = [s for s in slugs if project_slug_problem(s) is None]
    assert len({project_group(s) for s in kept}) == len(kept)
    assert all(len(project_group(s)) <= 32 for s in kept)


@pytest.mark.django_db
def test_a_project_cannot_take_a_slug_of_the_reserved_shape():
    pi = User.objects.create_user("lead")
    with pytest.raises(ValidationError) as refused:
        Project(slug="materials-sc-3963a796", name="Clash", pi=pi, share=1).full_clean()
    assert "slug" in refused.value.message_dict
    assert "materials-sc-3963a796" in refused.value.message_dict["slug"][0]
    Project(slug="materials-science-group-a", name="Long", pi=pi, share=1).full_clean()
