"""Which keys of an object and which items of an array a schema has evaluated, the JSON
Schema 2020-12 annotations that `unevaluatedProperties` and `unevaluatedItems` read.

A key is evaluated by `properties`/`patternProperties` naming it, by `additionalProperties`
(all the rest), and by the same keywords in the subschemas that apply in place and pass:
every `allOf` branch, each `anyOf`/`oneOf` branch the value matches, `if` when it matches and
then `then` (else `else`), `dependentSchemas` of the keys present, a `$ref` target, and a
nested `unevaluatedProperties` (all the rest). Items likewise: `prefixItems` (its length),
`items` (all the rest), the items `contains` matches, nested `unevaluatedItems`. A `not`
branch never evaluates anything.

Each builder returns a function of the value giving a set of keys (or indices), or None for
"all of them"; functions are built once per node and memoised, like the checks.
"""

from __future__ import annotations

from typing import Any, Callable

from mutators.late_memo import LateBoundMemo
from mutators.schema import Node

Evaluated = Callable[[Any], "set | None"]  # None: everything is evaluated


def _nothing(value: Any) -> set:
    return set()


def _everything(value: Any) -> None:
    return None


class Evaluation:
    """Builds `keys(node)` and `items(node)` on top of a `Compiler`'s branch checks."""

    def __init__(self, compiler: Any) -> None:
        self.compiler = compiler
        self._memo = LateBoundMemo(compiler.wrap)  # a recursive $ref gets its function bound late

    def keys(self, node: Node) -> Evaluated:
        """Keys `node` evaluates, its own `unevaluatedProperties` included."""
        return self._memoised(node, "keys", self._keys)

    def adjacent_keys(self, node: Node) -> Evaluated:
        """Keys evaluated beside `node`'s own `unevaluatedProperties` (what it must check)."""
        return self._memoised(node, "adjacent_keys", self._adjacent_keys)

    def items(self, node: Node) -> Evaluated:
        return self._memoised(node, "items", self._items)

    def adjacent_items(self, node: Node) -> Evaluated:
        return self._memoised(node, "adjacent_items", self._adjacent_items)

    def _memoised(self, node: Node, kind: str, build: Callable[[Node], Evaluated]) -> Evaluated:
        return self._memo.get((id(node), kind), lambda: build(node))

    def _keys(self, node: Node) -> Evaluated:
        if node.never:
            return _nothing
        if node.unevaluated_properties is not None:
            return _everything
        return self.adjacent_keys(node)

    def _adjacent_keys(self, node: Node) -> Evaluated:
        if node.never:
            return _nothing
        if node.additional is not None:
            return _everything
        names = frozenset(node.properties)
        patterns = tuple(pattern for pattern, _ in node.pattern_properties)

        def own(obj: dict) -> set:
            if not patterns:
                return {key for key in obj if key in names}
            return {key for key in obj if key in names or (
                type(key) is str and any(p.search(key) for p in patterns))}

        dependent = [(key, self.keys(sub)) for key, sub in node.dependent_schemas]

        def dependent_keys(obj: dict) -> list[set | None]:
            return [found(obj) for key, found in dependent if key in obj]

        return self._with_applicators(node, self.keys, own, dependent_keys if dependent else None)

    def _items(self, node: Node) -> Evaluated:
        if node.never:
            return _nothing
        if node.unevaluated_items is not None:
            return _everything
        return self.adjacent_items(node)

    def _adjacent_items(self, node: Node) -> Evaluated:
        if node.never:
            return _nothing
        if node.items is not None or node.items_true:
            return _everything
        prefix = len(node.prefix_items)
        contains = self.compiler.check(node.contains) if node.contains is not None else None

        def own(array: list) -> set:
            found = set(range(min(prefix, len(array))))
            if contains is not None:
                found.update(i for i, item in enumerate(array) if not contains(item))
            return found

        return self._with_applicators(node, self.items, own, None)

    def _with_applicators(self, node: Node, evaluated: Callable[[Node], Evaluated],
                          own: Callable[[Any], set],
                          extra: Callable[[Any], list] | None) -> Evaluated:
        """`own` plus what the in-place applicators that pass evaluate."""
        check = self.compiler.check
        always = [evaluated(branch) for branch in node.all_of]
        maybe = [(check(branch, keyed=False), evaluated(branch)) for branch in node.any_of]
        condition = None
        if node.if_ is not None:
            condition = (check(node.if_, keyed=False), evaluated(node.if_),
                         evaluated(node.then) if node.then is not None else None,
                         evaluated(node.else_) if node.else_ is not None else None)
        if not (always or maybe or condition or extra):
            return own

        def found(value: Any) -> set | None:
            parts = [branch(value) for branch in always]
            parts += [branch(value) for errors_of, branch in maybe if not errors_of(value)]
            if condition is not None:
                if_errors_of, if_keys, then_keys, else_keys = condition
                if not if_errors_of(value):
                    parts.append(if_keys(value))
                    parts.append(then_keys(value) if then_keys is not None else set())
                elif else_keys is not None:
                    parts.append(else_keys(value))
            if extra is not None:
                parts += extra(value)
            result = own(value)
            for part in parts:
                if part is None:
                    return None
                result |= part
            return result

        return found
