"""Configuration history: every change to the site's configuration is a version, and any
version can be restored (docs/console.md).

Pools, nodes, queues, routing and level rules, classifier thresholds, quotas, rate cards, allocations,
lease schedules, backfill across pools, storage areas, the image catalogue and projects' fair shares are watched
through Django's model signals, so a change is recorded however it is made: a console page,
the API, the admin console, a management command. A version keeps the object's fields before and after (foreign keys as
ids, many-to-many as lists of ids), its author, time and reason; the diff is computed from
the two. Operational state that the portal itself moves (a node's up/drained/down and health)
is not configuration: drains and resumes are in the audit log instead.

Rolling back to version v makes the object what it was right after v (deleting it if v
deleted it, recreating it with its old id if it has since been deleted), validates it as a
form would, and is itself recorded as a new version that names v.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, cast

from django.apps import apps
from django.contrib.auth.models import User
from django.core import serializers
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models.deletion import Collector, ProtectedError, RestrictedError
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save
from django.dispatch import Signal

from portal import audit
from portal.errors import ApplicationError
from portal.models import ConfigVersion

# model label → fields that are not configuration (never versioned, never restored).
TRACKED: dict[str, frozenset[str]] = {
    "scheduling.pool": frozenset(),
    "scheduling.node": frozenset({"state", "health"}),
    "scheduling.queue": frozenset(),
    "scheduling.routingrule": frozenset(),
    "scheduling.levelrule": frozenset(),
    "scheduling.classifiersettings": frozenset(),
    "scheduling.leaseschedule": frozenset(),
    "scheduling.poolborrowing": frozenset(),
    "scheduling.storagearea": frozenset(),
    "scheduling.imageregistry": frozenset(),
    "scheduling.catalogueimage": frozenset(),
    "scheduling.quota": frozenset({"updated_at"}),
    "portal.project": frozenset({"created_at"}),
    "accounting.rate": frozenset(),
    "accounting.allocation": frozenset(),
}

# Sent after a version is written (on commit): caches of the site's policy listen.
config_changed = Signal()

_restoring: ContextVar[ConfigVersion | None] = ContextVar("switchyard_restoring", default=None)

Action = ConfigVersion.Action


def _label(model: type[models.Model]) -> str:
    return model._meta.label_lower


def snapshot(instance: models.Model) -> dict[str, Any]:
    """The object's configuration as JSON values (what a version stores)."""
    skip = TRACKED[_label(type(instance))]
    fields = json.loads(serializers.serialize("json", [instance], cls=DjangoJSONEncoder))[0][
        "fields"
    ]
    return {name: value for name, value in sorted(fields.items()) if name not in skip}


def diff(before: dict | None, after: dict | None) -> list[tuple[str, Any, Any]]:
    """(field, old, new) for every field that differs; None stands for "did not exist"."""
    before, after = before or {}, after or {}
    names = sorted(set(before) | set(after))
    return [(n, before.get(n), after.get(n)) for n in names if before.get(n) != after.get(n)]


def _last(label: str, object_id: int) -> ConfigVersion | None:
    return ConfigVersion.objects.filter(model=label, object_id=object_id).order_by("-id").first()


def _last_after(label: str, object_id: int) -> dict | None:
    found = (
        ConfigVersion.objects.filter(model=label, object_id=object_id)
        .order_by("-id")
        .values_list("after", flat=True)[:1]
    )
    return found[0] if found else None


def _write(instance: models.Model, after: dict | None, *, created: bool = False) -> None:
    label = _label(type(instance))
    # A row just inserted has no earlier version (a rollback's re-creation writes its own).
    before = None if created else _last_after(label, instance.pk)
    if before == after:
        return  # saved, but nothing that is configuration changed
    restoring = _restoring.get()
    if restoring is not None:
        action = Action.ROLLBACK
    elif after is None:
        action = Action.DELETE
    else:
        action = Action.CREATE if before is None else Action.UPDATE
    author = audit.current_user()
    reason = audit.current_reason()
    version = ConfigVersion.objects.create(
        author=author,
        author_name=author.get_username() if author is not None else "",
        model=label,
        object_id=instance.pk,
        object_repr=str(instance)[:200],
        action=action,
        before=before,
        after=after,
        reason=reason,
        restores=restoring,
    )
    if author is None and restoring is None:
        # The portal's own changes (seed_demo, schedules) are versions, not people's acts.
        transaction.on_commit(lambda: config_changed.send(sender=ConfigVersion, version=version))
        return
    audit.record(
        audit.Action.CONFIG_ROLLBACK if restoring is not None else audit.Action.CONFIG_CHANGE,
        actor=author,
        target=f"{type(instance)._meta.verbose_name} {version.object_repr}",
        queue=_queue_of(instance),
        detail={"version": version.pk, "model": label, "action": action, "reason": reason},
    )
    transaction.on_commit(lambda: config_changed.send(sender=ConfigVersion, version=version))


def _quiet(instance: models.Model) -> bool:
    """While a rollback restores an object, its own saves are recorded once, at the end."""
    restoring = _restoring.get()
    return (
        restoring is not None
        and restoring.model == _label(type(instance))
        and restoring.object_id == instance.pk
    )


def _queue_of(instance: models.Model) -> str:
    if _label(type(instance)) == "scheduling.queue":
        return instance.serializable_value("name")
    queue = getattr(instance, "queue", None) if hasattr(instance, "queue_id") else None
    return queue.name if queue is not None else ""


BASELINE = "as it was before its first recorded change"


def _baseline(instance: models.Model, current) -> None:
    """An object older than its history (made before it began, or by a bulk write) gets its
    state as found as a first version, so its first change has a `before` to go back to."""
    label = _label(type(instance))
    if ConfigVersion.objects.filter(model=label, object_id=instance.pk).exists():
        return
    found = current()
    if found is None:
        return
    ConfigVersion.objects.create(
        model=label,
        object_id=instance.pk,
        object_repr=str(found)[:200],
        action=Action.CREATE,
        after=snapshot(found),
        reason=BASELINE,
    )


def _on_pre_save(sender, instance, raw=False, **kwargs) -> None:
    if raw or _label(sender) not in TRACKED or instance._state.adding or _quiet(instance):
        return
    _baseline(instance, lambda: sender._default_manager.filter(pk=instance.pk).first())


def _on_pre_delete(sender, instance, **kwargs) -> None:
    if _label(sender) in TRACKED and not _quiet(instance):
        _baseline(instance, lambda: sender._default_manager.filter(pk=instance.pk).first())


def _on_save(sender, instance, created=False, raw=False, **kwargs) -> None:
    if raw or _label(sender) not in TRACKED or _quiet(instance):
        return
    _write(instance, snapshot(instance), created=created)


def _on_delete(sender, instance, **kwargs) -> None:
    if _label(sender) in TRACKED and not _quiet(instance):
        _write(instance, None)


def _on_m2m(sender, instance, action: str, reverse: bool, **kwargs) -> None:
    if reverse or _label(type(instance)) not in TRACKED or _quiet(instance):
        return
    if action.startswith("pre_"):
        _baseline(instance, lambda: instance)
    elif action.startswith("post_"):
        _write(instance, snapshot(instance))


def connect() -> None:
    """Called once, from the portal app's ready()."""
    pre_save.connect(_on_pre_save, dispatch_uid="switchyard-history-pre-save")
    pre_delete.connect(_on_pre_delete, dispatch_uid="switchyard-history-pre-delete")
    post_save.connect(_on_save, dispatch_uid="switchyard-history-save")
    post_delete.connect(_on_delete, dispatch_uid="switchyard-history-delete")
    m2m_changed.connect(_on_m2m, dispatch_uid="switchyard-history-m2m")


@contextlib.contextmanager
def _rolling_back(version: ConfigVersion) -> Iterator[None]:
    token = _restoring.set(version)
    try:
        yield
    finally:
        _restoring.reset(token)


def versions_visible_to(user: User):
    """A platform admin sees every version; a queue admin, those of their queues."""
    found = ConfigVersion.objects.all()
    if user.is_superuser:
        return found
    ids = list(user.administered_queues.values_list("pk", flat=True))
    return found.filter(model="scheduling.queue", object_id__in=ids)


@transaction.atomic
def rollback(*, user: User, version: ConfigVersion, reason: str) -> ConfigVersion:
    """Make the object what it was right after `version`; the new version is returned."""
    if not user.is_superuser:
        raise ApplicationError("only a platform admin rolls back configuration", status=403)
    if not reason.strip():
        raise ApplicationError("say why you roll back", field="reason")
    model = apps.get_model(version.model)
    current = model.objects.filter(pk=version.object_id).first()
    before = _last(version.model, version.object_id)
    with audit.because(reason.strip()), _rolling_back(version):
        if version.after is None:
            if current is None:
                raise ApplicationError(f"it is already as v{version.pk} left it", field="version")
            object_id = current.pk
            _only_itself(current)
            current.delete()
            current.pk = object_id  # for the version; delete() forgets it
            _write(current, None)
        else:
            restored = _restore(model, current, version)
            _write(restored, snapshot(restored))
    latest = _last(version.model, version.object_id)
    if latest is None or (before is not None and latest.pk == before.pk):
        raise ApplicationError(f"it is already as v{version.pk} left it", field="version")
    return latest


def _only_itself(instance: models.Model) -> None:
    """A rollback deletes one object, never what hangs on it: refused when anything would go
    with it (or protects it), naming what."""
    collector = Collector(using=instance._state.db or "default")
    try:
        collector.collect([instance])
    except (ProtectedError, RestrictedError) as exc:
        names = sorted({str(o)[:60] for o in list(exc.args[1])[:3]})
        raise ApplicationError(
            f"cannot delete it: {', '.join(names)} still use it", field="version", status=409
        ) from None
    others = [
        obj
        for objs in collector.data.values()
        for obj in objs
        if not (type(obj) is type(instance) and obj.pk == instance.pk)
    ]
    others += [obj for qs in collector.fast_deletes for obj in qs[:3]]
    if others:
        names = sorted({f"{type(o)._meta.verbose_name} {str(o)[:60]}" for o in others[:3]})
        raise ApplicationError(
            f"deleting it would also delete {', '.join(names)}"
            + (" and more" if len(others) > 3 else "")
            + "; remove those first",
            field="version",
            status=409,
        )


def _restore(
    model: type[models.Model], current: models.Model | None, version: ConfigVersion
) -> models.Model:
    fields = {f.name: f for f in model._meta.get_fields() if f.concrete}
    after = cast(dict[str, Any], version.after)  # not a deletion: the caller undid those
    for name, value in after.items():
        field = fields.get(name)
        if field is not None and field.is_relation and value is not None:
            related = cast(type[models.Model], field.related_model)
            wanted = value if isinstance(value, list) else [value]
            found = related._default_manager.filter(pk__in=wanted).count()
            if found != len(set(wanted)):
                raise ApplicationError(
                    f"{name}: what it pointed to no longer exists; restore that first",
                    field="version",
                    got=value,
                )
    data = json.dumps([{"model": version.model, "pk": version.object_id, "fields": version.after}])
    try:
        restored = next(serializers.deserialize("json", data, ignorenonexistent=True))
    except serializers.base.DeserializationError as exc:
        raise ApplicationError(f"cannot restore it: {exc}", field="version") from None
    target = current if current is not None else restored.object
    if current is not None:
        for name in after:
            field = fields.get(name)
            if field is not None and not field.many_to_many:
                setattr(current, field.attname, getattr(restored.object, field.attname))
    try:
        target.full_clean()
    except ValidationError as exc:
        raise ApplicationError(
            "cannot restore it: "
            + "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()),
            field="version",
        ) from None
    target.save()
    for name, ids in (restored.m2m_data or {}).items():
        getattr(target, name).set(ids)
    return target


def previous_version(version: ConfigVersion) -> ConfigVersion | None:
    """The object's version just before `version` (what undoing it goes back to)."""
    return (
        ConfigVersion.objects.filter(
            model=version.model, object_id=version.object_id, pk__lt=version.pk
        )
        .order_by("-id")
        .first()
    )


def is_baseline(version: ConfigVersion) -> bool:
    """The state an object was found in when its history began: not a change anyone made."""
    return version.before is None and version.author_name == "" and version.reason == BASELINE


def undo_refusal(version: ConfigVersion, previous: ConfigVersion | None) -> str | None:
    """Why `version` cannot be undone whatever the site is now; None when it can be tried."""
    if previous is not None:
        return None
    if is_baseline(version):
        return f"v{version.pk} is how it was found when its history began, not a change"
    if version.before is not None:
        return f"no version before v{version.pk} is recorded to go back to"
    return None


@transaction.atomic
def undo(*, user: User, version: ConfigVersion, reason: str) -> ConfigVersion:
    """Undo one change: the object goes back to its version before `version` (recreated if
    the change deleted it), or is deleted if the change created it. Later changes to the same
    object go too (the page shows them first). The undo is a new version whose reason says
    which version it undid; it is returned."""
    if not user.is_superuser:
        raise ApplicationError("only a platform admin undoes configuration changes", status=403)
    if not reason.strip():
        raise ApplicationError("say why you undo it", field="reason")
    said = f"undo v{version.pk}: {reason.strip()}"
    previous = previous_version(version)
    refusal = undo_refusal(version, previous)
    try:
        if refusal is not None:
            raise ApplicationError(refusal, field="version", status=409)
        if previous is not None:
            return rollback(user=user, version=previous, reason=said)
        return _undo_creation(version, said)
    except ApplicationError as exc:
        item = exc.errors[0]
        # What the object is now (or what hangs on it) refuses the undo: a conflict.
        conflict = item.field == "version" and exc.status == 400
        raise ApplicationError(
            f"cannot undo v{version.pk}: {item.message}",
            field=item.field,
            got=item.got,
            status=409 if conflict else exc.status,
        ) from None


def _undo_creation(version: ConfigVersion, reason: str) -> ConfigVersion:
    """The change made the object and nothing was recorded before it: undoing deletes it."""
    model = apps.get_model(version.model)
    current = model._default_manager.filter(pk=version.object_id).first()
    if current is None:
        raise ApplicationError("it no longer exists", field="version", status=409)
    _only_itself(current)
    with audit.because(reason):
        current.delete()
    return cast(ConfigVersion, _last(version.model, version.object_id))
