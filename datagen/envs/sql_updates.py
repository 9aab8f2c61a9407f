"""State-change templates of the `sql` environment and the final table each one expects.

A template returns a `Draft` whose params name the target table role and the change; the
checker compares that table, row by row on its core columns, with `expected_rows(world,
params)`, and the other core tables by row count, so an agent that also wrecks unrelated rows
fails.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from datagen.envs._names import pick
from datagen.envs._toolkit import Draft
from datagen.envs.sql_tasks import describe, execute, find_entity, find_group, \
    find_item, lit, list_tables, query, round_half_up
from datagen.envs.sql_world import SqlWorld

CORE_WIDTH = {"group": 2, "entity": 5, "item": 4, "event": 6}


def core_rows(world: SqlWorld, role: str) -> list[tuple]:
    """Rows of a table role as the database stores them (core columns, prices in units)."""
    width = CORE_WIDTH[role]
    if role == "item":
        return [(r[0], r[1], r[2], r[3] / 100) for r in world.items]
    rows = {"group": world.groups, "entity": world.entities, "event": world.events}[role]
    return [r[:width] for r in rows]


def update_status(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    entity_id, old = pick(rng, list(dict.fromkeys((v[1], v[4]) for v in w.events)))
    new = pick(rng, [status for status in d.statuses if status != old])
    e = next(row for row in w.entities if row[0] == entity_id)
    n = sum(1 for v in w.events if v[1] == entity_id and v[4] == old)
    ask = pick(rng, (
        f"Mark every {old} {d.event_noun} of {d.entity_noun} {e[1]} as {new}.",
        f"{e[1]}'s {old} {d.event_plural} should now be {new}. Please update them.",
        f"Change the status of all {old} {d.event_plural} belonging to {e[1]} to {new}; "
        "leave everything else alone."))
    v = s.event_cols
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, "find the status column and the foreign key"),
            find_entity(s, e),
            query(f"SELECT {v[0]}, status FROM {s.event} WHERE {v[1]} = {entity_id} "
                  f"AND status = {lit(old)}", f"preview which {d.event_plural} will change"),
            execute(f"UPDATE {s.event} SET status = {lit(new)} WHERE {v[1]} = {entity_id} "
                    f"AND status = {lit(old)}", f"set those {d.event_plural} to {new}")]
    params = {"role": "event", "entity_id": entity_id, "from": old, "to": new}
    return Draft("update_status", ask, gold,
                 f"Updated {n} {d.event_noun if n == 1 else d.event_plural} of {e[1]} to {new}.",
                 params)


def delete_old(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    anchor = pick(rng, w.events)
    entity_id, status = anchor[1], anchor[4]
    dates = sorted(v[5] for v in w.events if v[1] == entity_id and v[4] == status)
    before = dates[-1] if dates[0] < dates[-1] and rng.random() < 0.5 else _next_day(anchor[5])
    e = next(row for row in w.entities if row[0] == entity_id)
    ask = pick(rng, (
        f"Delete all {status} {d.event_plural} of {e[1]} dated before {before}.",
        f"Clean up: remove {d.entity_noun} {e[1]}'s {d.event_plural} that are {status} and "
        f"older than {before} (strictly before that date).",
        f"Please purge the {status} {d.event_plural} for {e[1]} from before {before}. "
        "Nothing else should be removed."))
    v = s.event_cols
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, "find the date and status columns"), find_entity(s, e),
            execute(f"DELETE FROM {s.event} WHERE {v[1]} = {entity_id} AND status = "
                    f"{lit(status)} AND {v[5]} < {lit(before)}",
                    f"delete {e[1]}'s {status} {d.event_plural} from before {before}")]
    params = {"role": "event", "entity_id": entity_id, "status": status, "before": before}
    return Draft("delete_old", ask, gold, f"Deleted {e[1]}'s {status} {d.event_plural} "
                 f"dated before {before}.", params)


def _next_day(date: str) -> str:
    return (dt.date.fromisoformat(date) + dt.timedelta(days=1)).isoformat()


def insert_event(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    e, item = pick(rng, w.entities), pick(rng, w.items)
    qty, status, date = 1 + int(rng.random() * d.qty[2]), pick(rng, d.statuses), \
        w.today
    ask = pick(rng, (
        f"Record a new {d.event_noun} for {d.entity_noun} {e[1]}: {qty} {d.qty[1]} of "
        f"{item[1]}, dated {date}, status {status}.",
        f"Add a {status} {d.event_noun} dated {date} in which {e[1]} gets {qty} {d.qty[1]} "
        f"of the {d.item_noun} {item[1]}.",
        f"Please enter this into the database: {e[1]}, {item[1]}, {d.qty[1]}: {qty}, "
        f"status {status}, date {date}. It is a new {d.event_noun}."))
    v = s.event_cols
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.item, f"see how {d.item_plural} are named"),
            describe(s.event, f"see which columns a new {d.event_noun} needs"),
            find_entity(s, e), find_item(s, item),
            execute(f"INSERT INTO {s.event} ({v[1]}, {v[2]}, {v[3]}, status, {v[5]}) VALUES "
                    f"({e[0]}, {item[0]}, {qty}, {lit(status)}, {lit(date)})",
                    f"insert the new {d.event_noun}")]
    params = {"role": "event", "entity_id": e[0], "item_id": item[0], "qty": qty,
              "status": status, "date": date}
    return Draft("insert_event", ask, gold, f"Recorded the new {d.event_noun} for {e[1]}.",
                 params)


def move_entity(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    e = pick(rng, w.entities)
    g = pick(rng, [group for group in w.groups if group[0] != e[2]])
    ask = pick(rng, (
        f"{e[1]} has moved to the {g[1]} {d.group_noun}. Update their record.",
        f"Reassign {d.entity_noun} {e[1]} to the {g[1]} {d.group_noun}.",
        f"Please change the {d.group_noun} of {e[1]} to {g[1]} in the database."))
    gold = [list_tables(), describe(s.group, f"see how {d.group_noun} names are stored"),
            describe(s.entity, f"find the {d.group_noun} column of {s.entity}"),
            find_group(s, g), find_entity(s, e),
            execute(f"UPDATE {s.entity} SET {s.entity_cols[2]} = {g[0]} WHERE "
                    f"{s.entity_cols[0]} = {e[0]}", f"point {e[1]} at the {g[1]} {d.group_noun}")]
    params = {"role": "entity", "entity_id": e[0], "group_id": g[0]}
    return Draft("move_entity", ask, gold, f"{e[1]} now belongs to {g[1]}.", params)


def reprice(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    category = pick(rng, list(dict.fromkeys(item[2] for item in w.items)))
    percent = pick(rng, (5, 8, 10, 12, 15, 20, 25, -5, -10, -15, -20))
    verb = "Raise" if percent > 0 else "Lower"
    label, i = d.price[1], s.item_cols
    ask = pick(rng, (
        f"{verb} the {label} of every {category} {d.item_noun} by {abs(percent)}%, rounded to "
        "the cent.",
        f"Apply a {abs(percent)}% {'increase' if percent > 0 else 'discount'} to the {label} "
        f"of all {d.item_plural} in the {category} category (round to 2 decimals).",
        f"The {category} {d.item_plural} need new {label}s: {verb.lower()} each one by "
        f"{abs(percent)}% and round to cents."))
    gold = [list_tables(), describe(s.item, f"find the category and {label} columns"),
            query(f"SELECT {i[0]}, {i[1]}, {i[3]} FROM {s.item} WHERE category = "
                  f"{lit(category)}", f"preview the {category} {d.item_plural}"),
            execute(f"UPDATE {s.item} SET {i[3]} = ROUND({i[3]} * {100 + percent} / 100.0, 2) "
                    f"WHERE category = {lit(category)}",
                    f"change their {label} by {percent}%")]
    params = {"role": "item", "category": category, "percent": percent}
    return Draft("reprice", ask, gold, f"Updated the {label} of the {category} "
                 f"{d.item_plural}.", params)


def expected_rows(world: SqlWorld, template: str, p: dict[str, Any]) -> list[tuple]:
    """The target table's core rows after a correct solution; a None id marks a new row."""
    rows = core_rows(world, p["role"])
    if template == "update_status":
        return [r[:4] + (p["to"],) + r[5:] if r[1] == p["entity_id"] and r[4] == p["from"]
                else r for r in rows]
    if template == "delete_old":
        return [r for r in rows if not (r[1] == p["entity_id"] and r[4] == p["status"]
                                        and r[5] < p["before"])]
    if template == "insert_event":
        return rows + [(None, p["entity_id"], p["item_id"], p["qty"], p["status"], p["date"])]
    if template == "move_entity":
        return [r[:2] + (p["group_id"],) + r[3:] if r[0] == p["entity_id"] else r
                for r in rows]
    if template == "reprice":
        return [(r[0], r[1], r[2], round_half_up(round(r[3] * 100) * (100 + p["percent"]),
                                                 100) / 100)
                if r[2] == p["category"] else r for r in rows]
    raise KeyError(template)
