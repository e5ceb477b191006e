"""How the configuration history reads to people (docs/console.md, "Configuration history"):
a versioned model by its name ("Classifier settings", not `scheduling.classifiersettings`),
and a diff's related objects by their names ("hpc", not `3`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import models

from portal import history
from portal.models import model_display_name

Row = tuple[str, Any, Any]  # (field, before, after)


def model_choices() -> list[tuple[str, str]]:
    """(label, name) of every versioned model, by name: the history's filter."""
    return sorted(
        ((label, model_display_name(label)) for label in history.TRACKED), key=lambda c: c[1]
    )


def _relation(label: str, name: str) -> type[models.Model] | None:
    try:
        field = apps.get_model(label)._meta.get_field(name)
    except (LookupError, ValueError, FieldDoesNotExist):
        return None
    if not field.is_relation or field.related_model is None:
        return None
    return cast(type[models.Model], field.related_model)


def _ids(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def named(label: str, rows: list[Row]) -> list[Row]:
    """The diff rows with the ids of related objects replaced by the objects' names (one
    query per related model); an id whose object is gone reads "#3 (deleted)"."""
    related = {name: _relation(label, name) for name, _, _ in rows}
    wanted: dict[type[models.Model], set[Any]] = defaultdict(set)
    for name, before, after in rows:
        model = related[name]
        if model is not None:
            wanted[model].update(_ids(before) + _ids(after))
    found = {model: model._default_manager.in_bulk(ids) for model, ids in wanted.items()}

    def show(name: str, value: Any) -> Any:
        model = related[name]
        if model is None or value is None:
            return value
        names = [
            str(found[model][pk]) if pk in found[model] else f"#{pk} (deleted)"
            for pk in _ids(value)
        ]
        if isinstance(value, list):
            return ", ".join(names) or "(none)"
        return names[0]

    return [(name, show(name, before), show(name, after)) for name, before, after in rows]
