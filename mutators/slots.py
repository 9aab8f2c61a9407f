"""Walk a call's arguments together with the schema: every value with the schema node that
governs it (a "slot"). The mutators choose where to mutate from these slots.

Through `anyOf`/`oneOf` the walk follows the branch the value actually matches, through
`allOf` all branches, so a value nested in `Optional[Model]` still finds its field schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mutators.compile import CompiledSchema
from mutators.introspect import accepted_types
from mutators.jsonvalues import Path, json_type
from mutators.schema import Node

ANY = Node()
MAX_SLOTS = 512  # a call with a 10k-item array is walked only this far


@dataclass(frozen=True, slots=True)
class Slot:
    """A value inside the arguments: `parts` is its path, `node` its schema, `parent` the
    schema of the object/array holding it (None for the arguments object itself) and
    `required` whether its key is required there. `memo` holds what mutators derive from
    the slot, so that several operators of one call derive it once."""

    parts: Path
    value: Any
    node: Node
    parent: Node | None = None
    required: bool = False
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> Any:
        return self.parts[-1] if self.parts else None


def effective_nodes(schema: CompiledSchema, node: Node, value: Any) -> list[Node]:
    """`node` plus the allOf branches and the matching anyOf branch that apply to `value`,
    each once (in depth-first order: a node shared through `$ref`s is not walked again)."""
    nodes: list[Node] = []
    seen: set[int] = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        applied = list(node.all_of)
        if node.any_of:
            chosen = next((b for b in node.any_of if schema.accepts(b, value, keyed=False)), None)
            chosen = chosen or _same_type_branch(node.any_of, value)
            if chosen is not None:
                applied.append(chosen)
        stack.extend(reversed(applied))
    return nodes


def _same_type_branch(branches: tuple[Node, ...], value: Any) -> Node | None:
    tag = json_type(value)
    for branch in branches:
        types = accepted_types(branch)
        if types is None or tag in types:
            return branch
    return None


def property_node(nodes: list[Node], key: str) -> tuple[Node, bool]:
    """The schema of `key` in an object governed by `nodes`, and whether it is required."""
    required = any(key in node.required for node in nodes)
    for node in nodes:
        if key in node.properties:
            return node.properties[key], required
    for node in nodes:
        for pattern, sub in node.pattern_properties:
            if isinstance(key, str) and pattern.search(key):
                return sub, required
    for node in nodes:
        if isinstance(node.additional, Node):
            return node.additional, required
    return ANY, required


def item_node(nodes: list[Node], index: int) -> Node:
    """The schema of item `index` in an array governed by `nodes`."""
    for node in nodes:
        if index < len(node.prefix_items):
            return node.prefix_items[index]
    for node in nodes:
        if node.items is not None:
            return node.items
    return ANY


def walk(arguments: Any, schema: CompiledSchema, limit: int = MAX_SLOTS) -> list[Slot]:
    """Every value in `arguments` (the arguments object first, then depth-first in key and
    index order) with its schema. Deterministic: the order is the call's own order."""
    slots: list[Slot] = []
    stack = [Slot((), arguments, schema.root)]
    while stack and len(slots) < limit:
        slot = stack.pop()
        slots.append(slot)
        stack.extend(reversed(_children(schema, slot)))
    return slots


def _children(schema: CompiledSchema, slot: Slot) -> list[Slot]:
    value = slot.value
    if isinstance(value, dict):
        nodes = effective_nodes(schema, slot.node, value)
        children = []
        for key, item in value.items():
            node, required = property_node(nodes, key)
            children.append(Slot(slot.parts + (key,), item, node, slot.node, required))
        return children
    if isinstance(value, (list, tuple)):
        nodes = effective_nodes(schema, slot.node, value)
        return [Slot(slot.parts + (index,), item, item_node(nodes, index), slot.node)
                for index, item in enumerate(value)]
    return []


def object_slots(slots: list[Slot]) -> list[Slot]:
    """The slots holding objects (where keys can be added, renamed or dropped)."""
    return [slot for slot in slots if isinstance(slot.value, dict)]
