"""Questions about normalised schemas that both the validator and the mutators ask.

- Which keys may an object have, and is it closed? (`KeyPolicy`, `group_policy`)
- Which JSON types can a value have here? (`accepted_types`)

Closed objects. Tool calls are validated as closed objects: a key the schema does not declare
is an error unless the schema allows additional properties. "Declares" is read generously,
because specs split objects over `allOf`/`anyOf` branches and `$ref`s: the declared keys of an
object are its own `properties` and `required` keys plus those of its `allOf` branches, of
the `anyOf`/`oneOf` branch the value matches, and of its `if`/`then`/`else` and
`dependentSchemas` branches (all of them: which one applies is left to their own checks).
Each schema in that group votes: explicit `additionalProperties: false` (else
`unevaluatedProperties: false`) or declared `properties` vote "closed";
`additionalProperties: true` or a schema (else `unevaluatedProperties` true or a schema)
votes "open" (an explicit open beats a closed); a schema that says neither
(`{"type": "object"}`) does not vote. An object nobody votes on is free-form (open).

Both answers are computed once per node (`node_graph.per_node`: linear in the schema's size
however its `$ref`s share nodes) and kept in `node.memo`. A branch that leads back into the
node's own loop (a `$ref` cycle through allOf/anyOf/if, which validation could only follow
forever) counts as any type, and with its own keys only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mutators.jsonvalues import json_type
from mutators.node_graph import IN_CYCLE, per_node
from mutators.safe_regex import SafeRegex
from mutators.schema import Node

OPEN, CLOSED = "open", "closed"
_ALL_TYPES = frozenset(("string", "integer", "number", "boolean", "object", "array", "null"))
_MISSING = object()


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What keys an object may have: `declared` names and `patterns`; anything else is
    validated against `extra` when set, rejected when `vote` is CLOSED, accepted otherwise."""

    declared: frozenset[str] = frozenset()
    patterns: tuple[SafeRegex, ...] = ()
    vote: str | None = None
    extra: Node | None = None

    @property
    def closed(self) -> bool:
        return self.vote == CLOSED and self.extra is None

    def is_declared(self, key: str) -> bool:
        return key in self.declared or bool(self.patterns) and any(
            p.search(key) for p in self.patterns)


def merge_policies(first: KeyPolicy, second: KeyPolicy) -> KeyPolicy:
    """Both schemas apply to the same object: declared keys add up, an open vote wins."""
    votes = (first.vote, second.vote)
    vote = OPEN if OPEN in votes else CLOSED if CLOSED in votes else None
    return KeyPolicy(first.declared | second.declared, first.patterns + second.patterns,
                     vote, first.extra or second.extra)


def own_policy(node: Node) -> KeyPolicy:
    """The policy from `node`'s own keywords (no branches)."""
    declared = frozenset(node.properties) | frozenset(node.required)
    patterns = tuple(pattern for pattern, _ in node.pattern_properties)
    if node.additional is False:
        vote, extra = CLOSED, None
    elif node.additional is True:
        vote, extra = OPEN, None
    elif isinstance(node.additional, Node):
        vote, extra = OPEN, node.additional
    elif node.unevaluated_properties is not None:  # its own check validates the other keys
        vote, extra = (CLOSED if node.unevaluated_properties.never else OPEN), None
    else:
        vote, extra = (CLOSED if node.has_properties else None), None
    return KeyPolicy(declared, patterns, vote, extra)


def _object_capable(node: Node) -> bool:
    types = accepted_types(node)
    return types is None or "object" in types


def _union(policies: list[KeyPolicy]) -> KeyPolicy:
    """The policy of "one of these branches" when we do not know which one matched: every
    declared key counts; closed only if every branch that accepts objects is closed."""
    declared = frozenset().union(*(p.declared for p in policies)) if policies else frozenset()
    patterns = tuple(p for policy in policies for p in policy.patterns)
    votes = [p.vote for p in policies]
    vote = OPEN if OPEN in votes else CLOSED if votes and all(v == CLOSED for v in votes) else None
    extra = next((p.extra for p in policies if p.extra is not None), None)
    return KeyPolicy(declared, patterns, vote, extra)


def group_policy(node: Node) -> KeyPolicy:
    """The policy of `node` including all its branches (anyOf read as a union)."""
    found = node.memo.get("group_policy")
    return found if found is not None else per_node(node, "group_policy", _policy_branches,
                                                    _group_policy)


def base_policy(node: Node) -> KeyPolicy:
    """`node`'s own policy merged with its `allOf` branches and, read as a union, its
    if/then/else and dependentSchemas branches (not its `anyOf` branches)."""
    group_policy(node)  # computes the base policy on the way
    return node.memo["base_policy"]


def _conditional(node: Node) -> tuple[Node, ...]:
    return tuple(branch for branch in (node.if_, node.then, node.else_,
                                       *(sub for _, sub in node.dependent_schemas))
                 if branch is not None)


def _policy_branches(node: Node) -> tuple[Node, ...]:
    return (*node.all_of, *_conditional(node), *node.any_of)


def _group_policy(node: Node, of: Callable[[Node], Any]) -> KeyPolicy:
    def policy_of(branch: Node) -> KeyPolicy:  # a branch back into node's cycle: its own keys
        found = of(branch)
        return own_policy(branch) if found is IN_CYCLE else found

    policy = own_policy(node)
    for branch in node.all_of:
        policy = merge_policies(policy, policy_of(branch))
    conditional = _conditional(node)
    if conditional:
        policy = merge_policies(policy, _union([policy_of(b) for b in conditional
                                                if _object_capable(b)]))
    node.memo["base_policy"] = policy
    if node.any_of:
        policy = merge_policies(policy, _union([policy_of(b) for b in node.any_of
                                                if _object_capable(b)]))
    return policy


def accepted_types(node: Node) -> frozenset[str] | None:
    """The JSON types a value may have at `node` (None: any). 'number' implies 'integer'."""
    found = node.memo.get("accepted_types", _MISSING)
    return found if found is not _MISSING else per_node(
        node, "accepted_types", lambda n: (*n.all_of, *n.any_of), _accepted_types)


def _accepted_types(node: Node, of: Callable[[Node], Any]) -> frozenset[str] | None:
    if node.never:
        return frozenset()
    types: frozenset[str] | None = None
    if node.types is not None:
        types = frozenset(node.types) | ({"integer"} if "number" in node.types else set())
    elif node.enum is not None or node.const is not None:
        values = node.enum if node.enum is not None else node.const
        types = frozenset(json_type(v) for v in values)
        types |= {"integer"} if "number" in types else set()
    for branch in node.all_of:
        branch_types = of(branch)
        if branch_types is not None and branch_types is not IN_CYCLE:
            types = branch_types if types is None else types & branch_types
    if node.any_of:
        union: frozenset[str] | None = frozenset()
        for branch in node.any_of:
            branch_types = of(branch)
            union = None if branch_types is None or branch_types is IN_CYCLE or (
                union is None) else union | branch_types
        if union is not None:
            types = union if types is None else types & union
    return types


def describe_types(types: frozenset[str] | tuple[str, ...] | None) -> str:
    """'integer', 'string or null', 'integer, string or null' in canonical order."""
    if types is None:
        return "any value"
    ordered = [t for t in ("string", "number", "integer", "boolean", "object", "array", "null")
               if t in types and not (t == "integer" and "number" in types)]
    if not ordered:
        return "nothing (schema accepts no value)"
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " or " + ordered[-1]
