"""Inserting many rows, or several rows at once: `COPY` and multi-statement queries on
PostgreSQL.

`bulk_insert`: `COPY` on PostgreSQL, `bulk_create` elsewhere.

Django's `bulk_create` on PostgreSQL sends a batch as one `INSERT … SELECT * FROM UNNEST(…)`
whose arrays psycopg quotes in Python, character by character: for rows full of JSON (a
task's descriptor and spec) that quoting is most of the cost of a batch submission. `COPY`
formats the rows in psycopg's C code instead, and the server loads them without planning a
statement. The primary keys are drawn from the table's own sequence first (one query), so
the objects come back with their ids set, as `bulk_create` leaves them on PostgreSQL.

Like `bulk_create`, no `save()` runs and no model signal is sent; unlike it, there is no
`ignore_conflicts` or `update_conflicts`.

`update_rows`: many rows of one table, each with values of its own, in one UPDATE whose
SQL is written here (`CASE <pk> WHEN … THEN …`): Django's `bulk_update` and `Case(When(…))`
build an expression object per row and value and resolve each, which cost more than the
round trips they save.

`insert_together`: a few rows of different tables (a task, its first event, its audit row)
in one round trip instead of one per row plus BEGIN and COMMIT (`next_id` draws an id that
the others refer to, beforehand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

from django.db import connections, models, router
from django.db.models.sql import InsertQuery

M = TypeVar("M", bound=models.Model)


def bulk_insert(objs: Sequence[M], *, batch_size: int = 1000) -> list[M]:
    """Insert `objs` (new objects of one model) and set their primary keys. Call inside a
    transaction: a failure part-way leaves the rows written so far to its rollback."""
    objs = list(objs)
    if not objs:
        return objs
    model = type(objs[0])
    db = router.db_for_write(model)
    connection = connections[db]
    if connection.vendor != "postgresql":
        return model._default_manager.using(db).bulk_create(objs, batch_size=batch_size)
    meta = model._meta
    pk = meta.pk
    fields = [f for f in meta.concrete_fields if f is not pk and not f.generated]
    quote = connection.ops.quote_name
    # A concrete field has a column (the stubs allow None for the others).
    columns = ", ".join(quote(cast(str, f.column)) for f in [pk, *fields])
    with connection.cursor() as cursor:
        for at in range(0, len(objs), batch_size):
            chunk = objs[at : at + batch_size]
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [meta.db_table, pk.column, len(chunk)],
            )
            ids = [row[0] for row in cursor.fetchall()]
            with cursor.cursor.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy:
                for key, obj in zip(ids, chunk, strict=True):
                    copy.write_row(
                        [
                            key,
                            *(
                                f.get_db_prep_save(f.pre_save(obj, True), connection)
                                for f in fields
                            ),
                        ]
                    )
            for key, obj in zip(ids, chunk, strict=True):
                setattr(obj, pk.attname, key)
                obj._state.adding = False
                obj._state.db = db
    return objs


def next_id(model: type[models.Model]) -> int:
    """A primary key drawn from the model's sequence (PostgreSQL), for a row not yet written."""
    meta = model._meta
    connection = connections[router.db_for_write(model)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s))", [meta.db_table, meta.pk.column]
        )
        return cursor.fetchone()[0]


def insert_together(objs: Sequence[models.Model]) -> None:
    """Insert new objects (PostgreSQL), their primary keys set where they must be known, in
    one round trip: the INSERTs go as one query of several statements, which the server runs
    as one transaction (inside the caller's, if one is open).

    The values are written as they are on the objects: a date field with `auto_now(_add)` is
    stamped only where it is still empty (so a task's `submitted_at` set by its caller stays
    the one its first event was given). A primary key left None is the database's to choose,
    and stays None on the object. Like `bulk_create`, no `save()` runs and no model signal is
    sent.
    """
    connection = connections[router.db_for_write(type(objs[0]))]
    if connection.vendor != "postgresql":
        raise NotImplementedError("insert_together needs PostgreSQL's multi-statement queries")
    sqls, params = [], []
    for obj in objs:
        fields = [
            f
            for f in obj._meta.concrete_fields
            if not f.generated and not (f.primary_key and getattr(obj, f.attname) is None)
        ]
        for f in fields:
            stamped = getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
            if stamped and getattr(obj, f.attname) is None:
                f.pre_save(obj, add=True)
        query = InsertQuery(type(obj))
        query.insert_values(fields, [obj], raw=True)  # raw: no second pre_save
        [(sql, values)] = query.get_compiler(connection=connection).as_sql()
        sqls.append(sql)
        params.extend(values)
    with connection.cursor() as cursor:
        cursor.execute(";\n".join(sqls), params)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias


def update_rows(model: type[models.Model], rows: Sequence[tuple[object, dict[str, object]]]) -> int:
    """Set each row's own values, `rows` being (primary key, {field name: value}) with the
    same field names in every row, in one UPDATE; a value the rows share is set once.
    Returns the number of rows updated. Call inside a transaction where the rows' values
    must hold together."""
    if not rows:
        return 0
    db = router.db_for_write(model)
    connection = connections[db]
    quote = connection.ops.quote_name
    meta = model._meta
    pk_column = quote(cast(str, meta.pk.column))
    postgres = connection.vendor == "postgresql"
    sets: list[str] = []
    params: list[Any] = []
    for name in rows[0][1]:
        field = cast(models.Field, meta.get_field(name))  # a concrete field: it has a column
        column = quote(cast(str, field.column))
        values = [field.get_db_prep_save(values[name], connection) for _, values in rows]
        # PostgreSQL types a CASE of parameters as text: cast each to the column's type.
        to_type = f"::{field.db_type(connection)}" if postgres else ""
        raw = [values[name] for _, values in rows]
        if all(v == raw[0] for v in raw):
            sets.append(f"{column} = %s{to_type}")
            params.append(values[0])
            continue
        whens = " ".join(f"WHEN %s THEN %s{to_type}" for _ in rows)
        sets.append(f"{column} = CASE {pk_column} {whens} END")
        for (key, _), value in zip(rows, values, strict=True):
            params += [key, value]
    keys: list[Any] = [key for key, _ in rows]
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "
        f"WHERE {pk_column} IN ({', '.join(['%s'] * len(keys))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *keys])
        return cursor.rowcount
