"""Task templates of the `sql` environment: questions answered by joins and aggregates, and
state changes (update, delete, insert) judged on the final database.

Each template draws its targets from the world, computes the expected answer in Python (the
same arithmetic the gold SQL does) and returns a `Draft`, or None when the world offers no
suitable target (the caller then tries another template). Gold solutions always discover the
schema first and look ids up by name; the instruction never states an id.
"""

from __future__ import annotations

import random
from typing import Any

from datagen.envs._names import pick
from datagen.envs._toolkit import Draft
from datagen.envs.sql_world import Schema, SqlWorld
from datagen.types import GoldStep, ToolCall


def lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def list_tables() -> GoldStep:
    return GoldStep(ToolCall("list_tables", {}), "find out which tables the database has")


def describe(table: str, why: str) -> GoldStep:
    return GoldStep(ToolCall("describe_table", {"table": table}),
                    f"check the columns of {table} to {why}")


def query(sql: str, purpose: str) -> GoldStep:
    return GoldStep(ToolCall("run_query", {"sql": sql}), purpose)


def execute(sql: str, purpose: str) -> GoldStep:
    return GoldStep(ToolCall("execute", {"sql": sql}), purpose)


def find_entity(s: Schema, entity: tuple) -> GoldStep:
    return query(f"SELECT {s.entity_cols[0]} FROM {s.entity} WHERE {s.entity_cols[1]} = "
                 f"{lit(entity[1])}", f"look up the id of {s.domain.entity_noun} {entity[1]}")


def find_group(s: Schema, group: tuple) -> GoldStep:
    return query(f"SELECT {s.group_cols[0]} FROM {s.group} WHERE name = {lit(group[1])}",
                 f"look up the id of the {group[1]} {s.domain.group_noun}")


def find_item(s: Schema, item: tuple) -> GoldStep:
    return query(f"SELECT {s.item_cols[0]} FROM {s.item} WHERE {s.item_cols[1]} = "
                 f"{lit(item[1])}", f"look up the id of {s.domain.item_noun} {item[1]}")


def money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def round_half_up(numerator: int, denominator: int) -> int:
    return (2 * numerator + denominator) // (2 * denominator)


_NUMBER_HINTS = ("", "", " Answer with just the number.", " Reply with the number only.")
_OPENERS = ("", "", "", "Quick question about our database: ", "I'm preparing a report. ",
            "For the weekly review: ", "Hi! ", "Using the SQL database, ")


def _entities_with_events(w: SqlWorld) -> list[tuple]:
    owners = {event[1] for event in w.events}
    return [entity for entity in w.entities if entity[0] in owners]


def _max_unique(totals: dict[Any, int]) -> Any:
    """The key with the strictly largest total, or None on a tie."""
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def entity_total(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    e = pick(rng, _entities_with_events(w))
    total = sum(v[3] for v in w.events if v[1] == e[0])
    unit = d.qty[1]
    ask = pick(rng, (
        f"What is the total number of {unit} across all {d.event_plural} of "
        f"{d.entity_noun} {e[1]}?",
        f"Add up the {unit} over every {d.event_noun} that belongs to {d.entity_noun} {e[1]}. "
        "What is the total?",
        f"{e[1]} is one of our {d.entity_plural}. How many {unit} do their {d.event_plural} "
        "add up to?",
        f"How many {unit} in total are recorded on {e[1]}'s {d.event_plural}?"))
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, f"see how {d.event_plural} reference {d.entity_plural}"),
            find_entity(s, e),
            query(f"SELECT SUM({s.event_cols[3]}) AS total_{s.event_cols[3]} FROM {s.event} "
                  f"WHERE {s.event_cols[1]} = {e[0]}",
                  f"add up the {unit} on {e[1]}'s {d.event_plural}")]
    return Draft("entity_total", ask + pick(rng, _NUMBER_HINTS), gold, str(total), {})


def entity_status_value(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    prices = {item[0]: item[3] for item in w.items}
    pairs = list(dict.fromkeys((v[1], v[4]) for v in w.events))
    entity_id, status = pick(rng, pairs)
    e = next(row for row in w.entities if row[0] == entity_id)
    cents = sum(v[3] * prices[v[2]] for v in w.events if v[1] == entity_id and v[4] == status)
    price = s.item_cols[3]
    ask = pick(rng, (
        f"What is the total value ({d.qty[1]} times {d.price[1]}) of the {status} "
        f"{d.event_plural} of {d.entity_noun} {e[1]}? Round to two decimals.",
        f"Work out how much {e[1]}'s {status} {d.event_plural} are worth in total, "
        f"counting {d.qty[1]} x {d.price[1]}, to the cent.",
        f"Compute the combined {d.price[1]} value of all {status} {d.event_plural} for "
        f"{e[1]} (each {d.event_noun} counts its {d.qty[1]} times the {d.item_noun}'s "
        f"{d.price[1]}); give it with two decimals."))
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, f"find the {d.qty[1]}, status and foreign-key columns"),
            describe(s.item, f"find the {d.price[1]} column"), find_entity(s, e),
            query(f"SELECT ROUND(SUM(v.{s.event_cols[3]} * i.{price}), 2) AS total_value "
                  f"FROM {s.event} v JOIN {s.item} i ON i.{s.item_cols[0]} = v.{s.event_cols[2]} "
                  f"WHERE v.{s.event_cols[1]} = {entity_id} AND v.status = {lit(status)}",
                  f"sum {d.qty[1]} times {d.price[1]} over {e[1]}'s {status} {d.event_plural}")]
    return Draft("entity_status_value", ask, gold, money(cents), {})


def group_top_category(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    g = pick(rng, w.groups)
    members = {e[0] for e in w.entities if e[2] == g[0]}
    category_of = {item[0]: item[2] for item in w.items}
    totals: dict[str, int] = {}
    for v in w.events:
        if v[1] in members:
            totals[category_of[v[2]]] = totals.get(category_of[v[2]], 0) + v[3]
    top = _max_unique(totals)
    if top is None:
        return None
    ask = pick(rng, (
        f"Within the {g[1]} {d.group_noun}, which {d.item_noun} category accounts for the most "
        f"{d.qty[1]}?",
        f"Looking only at {d.entity_plural} in the {g[1]} {d.group_noun}: which category of "
        f"{d.item_plural} do their {d.event_plural} add up to the most {d.qty[1]} in?",
        f"Which {d.item_noun} category is the biggest by {d.qty[1]} for the {g[1]} "
        f"{d.group_noun}? Give the category name."))
    v, e, i = s.event_cols, s.entity_cols, s.item_cols
    gold = [list_tables(), describe(s.group, f"see how {d.group_noun} names are stored"),
            describe(s.entity, f"see how {d.entity_plural} link to a {d.group_noun}"),
            describe(s.event, f"see how {d.event_plural} link to {d.entity_plural}"),
            describe(s.item, "find the category column"), find_group(s, g),
            query(f"SELECT i.category, SUM(v.{v[3]}) AS total FROM {s.event} v "
                  f"JOIN {s.entity} e ON e.{e[0]} = v.{v[1]} "
                  f"JOIN {s.item} i ON i.{i[0]} = v.{v[2]} WHERE e.{e[2]} = {g[0]} "
                  "GROUP BY i.category ORDER BY total DESC LIMIT 1",
                  f"total the {d.qty[1]} per category for the {g[1]} {d.group_noun}")]
    return Draft("group_top_category", ask, gold, top, {})


def group_active_count(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    group_of = {e[0]: e[2] for e in w.entities}
    pairs = list(dict.fromkeys((group_of[v[1]], v[4]) for v in w.events))
    group_id, status = pick(rng, pairs)
    g = next(row for row in w.groups if row[0] == group_id)
    count = len({v[1] for v in w.events if v[4] == status and group_of[v[1]] == group_id})
    ask = pick(rng, (
        f"How many {d.entity_plural} in the {g[1]} {d.group_noun} have at least one {status} "
        f"{d.event_noun}?",
        f"Count the {d.entity_plural} of the {g[1]} {d.group_noun} with one or more "
        f"{d.event_plural} in status {status}.",
        f"In {g[1]}, how many distinct {d.entity_plural} have a {d.event_noun} that is "
        f"{status}?"))
    v, e = s.event_cols, s.entity_cols
    gold = [list_tables(), describe(s.group, f"see how {d.group_noun} names are stored"),
            describe(s.entity, f"see how {d.entity_plural} link to a {d.group_noun}"),
            describe(s.event, "find the status column"), find_group(s, g),
            query(f"SELECT COUNT(DISTINCT v.{v[1]}) AS {d.entity_plural.replace(' ', '_')} "
                  f"FROM {s.event} v JOIN {s.entity} e ON e.{e[0]} = v.{v[1]} "
                  f"WHERE e.{e[2]} = {group_id} AND v.status = {lit(status)}",
                  f"count the {d.entity_plural} in {g[1]} with a {status} {d.event_noun}")]
    return Draft("group_active_count", ask + pick(rng, _NUMBER_HINTS), gold, str(count), {})


def group_top_metric(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    g = pick(rng, w.groups)
    members = [e for e in w.entities if e[2] == g[0]]
    if not members:
        return None
    highest = rng.random() < 0.6
    top = (max if highest else min)(members, key=lambda e: e[3])
    label, most = d.metric[0][1], "highest" if highest else "lowest"
    ask = pick(rng, (
        f"Which {d.entity_noun} in the {g[1]} {d.group_noun} has the {most} {label}?",
        f"Find the {d.entity_noun} with the {('largest', 'smallest')[not highest]} {label} "
        f"among those in {g[1]}. Answer with their name.",
        f"Who has the {most} {label} in the {g[1]} {d.group_noun}?"))
    e = s.entity_cols
    gold = [list_tables(), describe(s.group, f"see how {d.group_noun} names are stored"),
            describe(s.entity, f"find the {label} and {d.group_noun} columns"),
            find_group(s, g),
            query(f"SELECT {e[1]}, {e[3]} FROM {s.entity} WHERE {e[2]} = {g[0]} "
                  f"ORDER BY {e[3]} {'DESC' if highest else 'ASC'} LIMIT 1",
                  f"rank the {g[1]} {d.entity_plural} by {label}")]
    return Draft("group_top_metric", ask, gold, top[1], {})


def category_avg_price(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    status_of = {}
    for v in w.events:
        status_of.setdefault(v[2], []).append(v[4])
    category, status = pick(rng, list(dict.fromkeys(
        (item[2], st) for item in w.items for st in status_of.get(item[0], ()))))
    prices = [item[3] for item in w.items
              if item[2] == category and status in status_of.get(item[0], ())]
    total, n = sum(prices), len(prices)
    if (2 * total) % n == 0 and (2 * total // n) % 2 == 1:
        return None  # a half-cent average: SQLite and Python may round it differently
    ask = pick(rng, (
        f"What is the average {d.price[1]} of {category} {d.item_plural} that appear in at "
        f"least one {status} {d.event_noun}? Round to two decimals.",
        f"Among {d.item_plural} in the {category} category that have a {status} "
        f"{d.event_noun}, what is the mean {d.price[1]} (2 decimals)?"))
    i, v = s.item_cols, s.event_cols
    gold = [list_tables(), describe(s.item, f"find the category and {d.price[1]} columns"),
            describe(s.event, f"see how {d.event_plural} reference {d.item_plural}"),
            query(f"SELECT ROUND(AVG({i[3]}), 2) AS average_{i[3]} FROM {s.item} "
                  f"WHERE category = {lit(category)} AND {i[0]} IN "
                  f"(SELECT {v[2]} FROM {s.event} WHERE status = {lit(status)})",
                  f"average the {d.price[1]} of {category} {d.item_plural} with a {status} "
                  f"{d.event_noun}")]
    return Draft("category_avg_price", ask, gold, money(round_half_up(total, n)), {})


def entity_favourite_item(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    e = pick(rng, _entities_with_events(w))
    totals: dict[int, int] = {}
    for v in w.events:
        if v[1] == e[0]:
            totals[v[2]] = totals.get(v[2], 0) + v[3]
    top = _max_unique(totals)
    if top is None:
        return None
    item = next(row for row in w.items if row[0] == top)
    ask = pick(rng, (
        f"Which {d.item_noun} accounts for the most {d.qty[1]} across {e[1]}'s "
        f"{d.event_plural}?",
        f"For {d.entity_noun} {e[1]}, which {d.item_noun} has the largest total {d.qty[1]}? "
        f"Give its name.",
        f"Find {e[1]}'s top {d.item_noun} by {d.qty[1]}."))
    v, i = s.event_cols, s.item_cols
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, f"find the {d.qty[1]} and foreign-key columns"),
            describe(s.item, f"find the name column of {d.item_plural}"), find_entity(s, e),
            query(f"SELECT i.{i[1]}, SUM(v.{v[3]}) AS total FROM {s.event} v JOIN {s.item} i "
                  f"ON i.{i[0]} = v.{v[2]} WHERE v.{v[1]} = {e[0]} GROUP BY i.{i[0]} "
                  "ORDER BY total DESC LIMIT 1",
                  f"total {e[1]}'s {d.qty[1]} per {d.item_noun}")]
    return Draft("entity_favourite_item", ask, gold, item[1], {})


def entity_latest(w: SqlWorld, rng: random.Random) -> Draft | None:
    s, d = w.schema, w.schema.domain
    entity_id, status = pick(rng, list(dict.fromkeys((v[1], v[4]) for v in w.events)))
    e = next(row for row in w.entities if row[0] == entity_id)
    latest = max(v[5] for v in w.events if v[1] == entity_id and v[4] == status)
    ask = pick(rng, (
        f"When was the most recent {status} {d.event_noun} of {e[1]}? Answer with the date.",
        f"What is the date of {d.entity_noun} {e[1]}'s latest {d.event_noun} with status "
        f"{status}?",
        f"Give me the date (YYYY-MM-DD) of the newest {status} {d.event_noun} for {e[1]}."))
    v = s.event_cols
    gold = [list_tables(), describe(s.entity, f"see how {d.entity_plural} are named"),
            describe(s.event, "find the date and status columns"), find_entity(s, e),
            query(f"SELECT MAX({v[5]}) AS latest FROM {s.event} WHERE {v[1]} = {entity_id} "
                  f"AND status = {lit(status)}",
                  f"find the latest date among {e[1]}'s {status} {d.event_plural}")]
    return Draft("entity_latest", ask, gold, latest, {})
