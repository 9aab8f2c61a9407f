"""Environment registry.

Built-in environments register themselves by name. A user's own environment is named in the
config either as `module.path:ClassName` or by a registered name after its module has been
imported (list the module under `env_modules` in the config, or decorate the class with
`@register_env` in a module you import yourself).
"""

from __future__ import annotations

import importlib
from typing import Callable

from datagen.envs.base import Environment, tool_spec

_REGISTRY: dict[str, type[Environment]] = {}
_BUILTIN_MODULES = ("datagen.envs.sql", "datagen.envs.fs", "datagen.envs.enterprise")
# The environments a run, `datagen eval irr` and the tools use when none are named.
DEFAULT_ENVS = ("sql", "fs", "enterprise")


def register_env(cls: type[Environment]) -> type[Environment]:
    """Class decorator: make `cls` available under `cls.name`."""
    if not getattr(cls, "name", None):
        raise ValueError(f"{cls.__qualname__} needs a class attribute `name` to be registered")
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def import_modules(modules: list[str]) -> None:
    """Import user modules so that their `@register_env` classes are registered."""
    for module in modules:
        importlib.import_module(module)


def available_envs() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def resolve_env(name: str) -> type[Environment]:
    """The environment class for a registered name or a `module:Class` reference."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise TypeError(f"{name} is not an Environment subclass")
        return cls
    raise KeyError(f"unknown environment {name!r}; available: {', '.join(available_envs())}")


def make_env(name: str) -> Environment:
    return resolve_env(name)()


EnvFactory = Callable[[], Environment]

__all__ = ["Environment", "tool_spec", "register_env", "resolve_env", "make_env",
           "available_envs", "import_modules", "DEFAULT_ENVS"]
