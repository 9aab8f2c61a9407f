"""One function built per key, where building may ask for the key being built: a recursive
`$ref` reaches its own node again before its check exists. That request gets a forwarder
that calls the function once it is built (late binding), so recursive schemas compile to
finite closure trees. Used for validation checks (`compile.py`) and evaluation annotations
(`evaluated.py`)."""

from __future__ import annotations

from typing import Any, Callable, Hashable

Function = Callable[[Any], Any]


class LateBoundMemo:
    def __init__(self) -> None:
        self._built: dict[Hashable, Function | None] = {}   # None: being built
        self._forward: dict[Hashable, list] = {}

    def get(self, key: Hashable, build: Callable[[], Function]) -> Function:
        if key in self._built:
            built = self._built[key]
            if built is not None:
                return built
            cell = self._forward.setdefault(key, [None])
            return lambda value: cell[0](value)
        self._built[key] = None
        built = self._built[key] = build()
        if key in self._forward:
            self._forward.pop(key)[0] = built
        return built
