"""hallucinated_key: the call uses a key the tool does not have.

Subkinds, in the words a reviewer would use:
- synonym: a word of a real key swapped for a near-synonym (`user_id` for `customer_id`,
  `begin_time` for `start_time`, `max_results` for `limit`);
- renamed: the same words spelled differently (`customerId`, `start` for `start_time`,
  `qty` for `quantity`, `tag` for `tags`);
- borrowed: a key of another tool of the environment (`other_tools`);
- invented: a common option name, only for objects that declare no keys at all.

A real key present in the call is renamed in place (its value moves with it, as a model
would write it); an absent one is added with a plausible value. Only closed objects qualify:
where the schema allows additional properties no key is unknown.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Any, Iterator

from mutators.introspect import group_policy
from mutators.jsonvalues import copy_json, format_path, get_at, rename_key, set_at
from mutators.negative import (Candidate, KindSpec, MutationContext, Proposal, interleave_by,
                               value_rng)
from mutators.sample import sample_value
from mutators.schema import Node
from mutators.slots import Slot, effective_nodes, property_node
from mutators.validate import ToolInfo, ValidationError

SYNONYMS: dict[str, tuple[str, ...]] = {
    "customer": ("user", "client", "account"), "user": ("customer", "account", "member"),
    "client": ("customer", "user"), "account": ("user", "customer"),
    "id": ("identifier", "key", "number"), "start": ("begin", "from"),
    "end": ("finish", "until", "stop"), "begin": ("start",), "from": ("start", "since"),
    "to": ("until", "end"), "time": ("timestamp", "datetime", "date"), "date": ("day", "time"),
    "query": ("search", "q", "keywords"),
    "limit": ("max_results", "count", "top_k", "page_size"), "name": ("title", "label"),
    "title": ("name", "subject"), "path": ("file_path", "filepath", "location"),
    "file": ("document", "path"), "email": ("email_address", "mail"),
    "message": ("text", "body", "content"), "text": ("content", "body", "message"),
    "body": ("content", "text"), "content": ("body", "text", "data"), "status": ("state",),
    "state": ("status",), "amount": ("total", "value", "sum"), "price": ("cost", "amount"),
    "quantity": ("count", "amount"), "count": ("number", "total"),
    "description": ("details", "summary"), "address": ("location",),
    "phone": ("phone_number", "telephone"), "type": ("kind", "category"),
    "category": ("type", "group"), "tags": ("labels", "keywords"),
    "url": ("link", "uri", "href"), "order": ("purchase",), "product": ("item",),
    "item": ("product",), "ticket": ("issue", "case"), "priority": ("severity", "urgency"),
    "sort": ("order_by", "sort_by"), "offset": ("skip",), "page": ("page_number",),
    "recursive": ("recurse", "deep"), "table": ("table_name",), "sql": ("query", "statement"),
    "city": ("town", "location"), "country": ("nation",), "assignee": ("owner", "assigned_to"),
    "owner": ("assignee",), "note": ("comment",), "comment": ("note", "remark"),
    "reason": ("cause", "explanation"), "dir": ("folder", "directory"),
    "directory": ("folder", "dir"), "pattern": ("glob", "regex"), "size": ("length",),
    "destination": ("target", "dest"), "source": ("src", "origin"),
    "recipient": ("to", "receiver"), "subject": ("title", "topic"),
    "language": ("lang", "locale"),
}
ABBREVIATIONS = {"quantity": "qty", "description": "desc", "number": "num", "message": "msg",
                 "identifier": "id", "information": "info", "configuration": "config",
                 "directory": "dir", "maximum": "max", "minimum": "min", "address": "addr",
                 "amount": "amt", "reference": "ref", "document": "doc", "repository": "repo",
                 "parameters": "params", "destination": "dest", "source": "src",
                 "temperature": "temp", "password": "pwd", "database": "db"}
INVENTED = ("verbose", "options", "format", "limit", "id", "query")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def split_key(key: str) -> tuple[list[str], str]:
    """(lower-case words, style): 'customer_id' -> (['customer', 'id'], 'snake')."""
    style = "kebab" if "-" in key else "snake" if "_" in key else (
        "camel" if any(c.isupper() for c in key[1:]) else "flat")
    return [w.lower() for w in _WORD.findall(key)], style


def join_key(words: list[str], style: str) -> str:
    words = [part for word in words for part in word.split("_")]
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return ("-" if style == "kebab" else "_").join(words)


@lru_cache(maxsize=4096)
def synonym_keys(key: str) -> tuple[str, ...]:
    """Keys with one word swapped for a near-synonym, in the key's own style."""
    words, style = split_key(key)
    found = []
    for index, word in enumerate(words):
        for synonym in SYNONYMS.get(word, ()):
            found.append(join_key(words[:index] + [synonym] + words[index + 1:],
                                  "snake" if style == "flat" and "_" in synonym else style))
    return tuple(found)


@lru_cache(maxsize=4096)
def renamed_keys(key: str) -> tuple[str, ...]:
    """The same words spelled differently: other case style, a word dropped, abbreviated,
    singular/plural."""
    words, style = split_key(key)
    if not words:
        return ()
    found = [join_key(words, other) for other in ("camel", "snake", "kebab") if other != style]
    if len(words) > 1:
        found += [join_key(words[:i] + words[i + 1:], style) for i in range(len(words))]
    found += [join_key([ABBREVIATIONS.get(w, w) for w in words], style)]
    last = words[-1]
    found.append(join_key(words[:-1] + [last[:-1] if last.endswith("s") else last + "s"], style))
    return tuple(k for k in dict.fromkeys(found) if k and k != key)


def _closed_objects(ctx: MutationContext) -> list[Slot]:
    return [s for s in ctx.slots if isinstance(s.value, dict) and group_policy(s.node).closed]


def _declared_variants(node: Node, subkind: str) -> tuple[tuple[str, str], ...]:
    """(real key, its synonym or renamed variant) for the declared keys of a closed object,
    the variants that are not declared themselves, in proposal order. They depend on the
    schema only, so they are kept on the node's memo (rebuilt per call, with the sorting and
    the `is_declared` checks, they were a third of the kind's proposal)."""
    memo_key = f"hallucinated_key:{subkind}"
    pairs = node.memo.get(memo_key)
    if pairs is None:
        policy = group_policy(node)
        variants = synonym_keys if subkind == "synonym" else renamed_keys
        pairs = node.memo[memo_key] = tuple(
            (real, fake) for real in sorted(policy.declared) for fake in variants(real)
            if not policy.is_declared(fake))
    return pairs


def _key_candidates(ctx: MutationContext, slot: Slot, subkind: str) -> Iterator[Proposal]:
    pairs = _declared_variants(slot.node, subkind)
    value = slot.value
    for real, fake in pairs:
        if fake not in value:  # renaming a key the call uses (preferred) or adding one
            yield Proposal(subkind, real if real in value else None, _key_candidate,
                           (slot, subkind, real, fake))


def _key_candidate(ctx: MutationContext, slot: Slot, subkind: str, real: str,
                   fake: str) -> Candidate:
    """The candidate of a drawn (real key, variant) proposal of `_key_candidates`."""
    value, parts = slot.value, slot.parts
    if real in value:
        build = ctx.edited(lambda a, p=parts, r=real, f=fake: rename_key(get_at(a, p), r, f))
        how, replaced = f"renamed `{real}` to `{fake}`", real
    else:  # the value is sampled only if this candidate is tried
        nodes = effective_nodes(ctx.tool.schema, slot.node, value)
        build = ctx.edited(lambda a, p=parts + (fake,), r=real, s=ctx.seed, n=nodes: set_at(
            a, p, sample_value(property_node(n, r)[0], value_rng(s, p), r)))
        how, replaced = f"added `{fake}` (a {subkind} of the real key `{real}`)", None
    return Candidate(subkind, parts + (fake,), replaced, fake, build,
                     f"{how} at {format_path(parts)}")


def synonym(ctx: MutationContext) -> Iterator[Proposal]:
    for slot in _closed_objects(ctx):
        yield from _key_candidates(ctx, slot, "synonym")


def renamed(ctx: MutationContext) -> Iterator[Proposal]:
    for slot in _closed_objects(ctx):
        yield from _key_candidates(ctx, slot, "renamed")


_PER_CALL = object()     # a borrowable key whose value is drawn from the call's RNG
_MAX_TOOL_SETS = 8      # other-tool sets remembered per tool schema (an environment has one)


def borrowed(ctx: MutationContext) -> Iterator[Proposal]:
    """Top-level keys of the environment's other tools that this tool does not declare."""
    root = ctx.slots[0]
    if not group_policy(root.node).closed or not isinstance(root.value, dict):
        return
    value = root.value
    for key, proposal in _borrowable(ctx)[1]:
        if key not in value:
            yield proposal


def _borrowed_candidate(ctx: MutationContext, key: str, node: Node, owner: str,
                        value: Any) -> Candidate:
    return Candidate("borrowed", (key,), None, key,
                     ctx.edited(lambda a, k=key, n=node, v=value, s=ctx.seed: a.__setitem__(
                         k, _borrowed_value(s, k, n, v))),
                     f"added `{key}`, a parameter of tool `{owner}`")


def _borrowed_value(seed: str, key: str, node: Node, kept: Any) -> Any:
    """The kept value, or one drawn now (an enum member) when the candidate is tried."""
    if kept is _PER_CALL:
        return sample_value(node, value_rng(seed, (key,)), key)
    return copy_json(kept)


def borrowable(ctx: MutationContext) -> list[tuple[str, Node, str, Any]]:
    """(key, schema, owning tool, value) of the other tools' top-level keys that this tool
    does not declare. They depend on the schemas only, so they are kept on the tool's schema
    root per set of other tools (they were rebuilt, each with a sampled value, per call: ~10%
    of the demo pipeline). A value that `sample_value` draws from the RNG (an enum) is
    `_PER_CALL`; the others do not depend on the call and are sampled once."""
    return _borrowable(ctx)[0]


def _borrowable(ctx: MutationContext) -> tuple[list[tuple[str, Node, str, Any]],
                                               list[tuple[str, Proposal]]]:
    """`borrowable` and a proposal per key, kept together (neither depends on the call)."""
    root = ctx.slots[0].node
    others = tuple(o for o in ctx.other_tools if o.name != ctx.tool.name)
    kept: dict[tuple[int, ...], tuple] = root.memo.setdefault("borrowable", {})
    ids = tuple(map(id, others))
    hit = kept.get(ids)
    if hit is not None and all(a is b for a, b in zip(hit[0], others)):
        return hit[1], hit[2]
    policy = group_policy(root)
    found = [(key, node, other.name, _fixed_value(node, key))
             for other in others for key, node in group_properties(other)
             if not policy.is_declared(key)]
    proposals = [(key, Proposal("borrowed", None, _borrowed_candidate, entry))
                 for entry in found for key in entry[:1]]
    if len(kept) >= _MAX_TOOL_SETS:
        kept.clear()
    kept[ids] = (others, found, proposals)
    return found, proposals


def _fixed_value(node: Node, key: str) -> Any:
    """`sample_value(node)` when it draws nothing from the RNG, else `_PER_CALL`."""
    probe = random.Random(0)
    before = probe.getstate()
    value = sample_value(node, probe, key)
    return value if probe.getstate() == before else _PER_CALL


def group_properties(tool: ToolInfo) -> list[tuple[str, Node]]:
    """(key, schema) of a tool's top-level parameters, own and from allOf/anyOf branches."""
    root = tool.schema.root
    seen: dict[str, Node] = {}
    for node in (root, *root.all_of, *root.any_of):
        for key, sub in node.properties.items():
            seen.setdefault(key, sub)
    return list(seen.items())


def invented(ctx: MutationContext) -> Iterator[Proposal]:
    """Common option names, for closed objects that declare no key to twist."""
    for slot in _closed_objects(ctx):
        policy = group_policy(slot.node)
        if policy.declared:
            continue
        for key in INVENTED:
            if not policy.is_declared(key) and key not in slot.value:
                yield Proposal("invented", None, _invented_candidate, (slot.parts + (key,), key))


def _invented_candidate(ctx: MutationContext, parts: tuple, key: str) -> Candidate:
    return Candidate("invented", parts, None, key,
                     ctx.edited(lambda a, p=parts, k=key, s=ctx.seed: set_at(
                         a, p, sample_value(Node(), value_rng(s, p), k))),
                     f"added `{key}` to an object that takes no keys")


def accepts(ctx: MutationContext, candidate: Candidate, call: dict,
            errors: list[ValidationError]) -> bool:
    """Rejected because of that key: an unknown-key error at the hallucinated key's path."""
    return any(e.reason == "unknown_key" and e.path == candidate.where for e in errors)


def impossible(ctx: MutationContext) -> str:
    if not _closed_objects(ctx):
        return ("the schema allows additional properties at every object in the call, "
                "so no key can be unknown")
    return "no plausible hallucinated key is rejected by the schema"


def order(candidates: list[Candidate | Proposal], rng) -> Iterator[Candidate | Proposal]:
    """A random subkind first; within it, renaming a key the call uses beats adding one."""
    return interleave_by(candidates, rng, lambda c: c.subkind,
                         prefer=lambda c: c.original is not None)


SPEC = KindSpec("hallucinated_key", (synonym, renamed, borrowed, invented), accepts,
                impossible, order)
