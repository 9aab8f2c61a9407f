"""The base of every config section, datagen's and the trainer's.

Unknown keys are refused and a loaded config is frozen. pydantic's lax mode also reads YAML's
`true` / `false` as 1 / 0 where a number is expected (`max_steps: true` trained one step,
`chunk_size: true` made chunks of one trajectory): a boolean given for a number is refused,
naming the field, like any other wrong type.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

_NUMBERS = (int, float)


def wants_a_number(annotation: Any) -> bool:
    """Whether a field's type takes numbers only (`int`, `float`, `int | None`, ...)."""
    union = get_origin(annotation) in (Union, types.UnionType)
    kinds = [kind for kind in (get_args(annotation) if union else (annotation,))
             if kind is not type(None)]
    return bool(kinds) and all(kind in _NUMBERS for kind in kinds)


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and wants_a_number(cls.model_fields[info.field_name].annotation):
            raise ValueError("a number is expected, not true/false")
        return value


__all__ = ["ConfigModel", "wants_a_number"]
