"""One function built per key, where building may ask for the key being built: a recursive
`$ref` reaches its own node again before its check exists. That request gets a forwarder
that calls the function once it is built (late binding), so recursive schemas compile to
finite closure trees. Used for validation checks (`compile.py`) and evaluation annotations
(`evaluated.py`). `wrap`, when given, is applied to each function built (`check_budget.counted`
for schemas whose checks can multiply)."""

from __future__ import annotations

from typing import Any, Callable, Hashable

Function = Callable[[Any], Any]


class LateBoundMemo:
    def __init__(self, wrap: Callable[[Function], Function] | None = None) -> None:
        self._built: dict[Hashable, Function | None] = {}   # None: being built
        self._forward: dict[Hashable, list] = {}
        self._wrap = wrap

    def get(self, key: Hashable, build: Callable[[], Function]) -> Function:
        if key in self._built:
            built = self._built[key]
            if built is not None:
                return built
            cell = self._forward.setdefault(key, [None])
            return lambda value: cell[0](value)
        self._built[key] = None
        built = build() if self._wrap is None else self._wrap(build())
        self._built[key] = built
        if key in self._forward:
            self._forward.pop(key)[0] = built
        return built
