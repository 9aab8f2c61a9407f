"""The small shipped configs (`*tiny*`, `*demo*`) run from a fresh clone: every path they
name is relative to the repository root. (The production configs name cluster mounts such
as /mnt/shared on purpose; a path into one developer's worktree is not that.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

SMALL = sorted(p for p in (ROOT / "configs").glob("*.yaml")
               if "tiny" in p.name or "demo" in p.name)


def strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings(item, f"{where}.{index}")
    elif isinstance(value, str):
        yield where, value


def test_small_configs_are_found():
    names = {p.name for p in SMALL}
    assert {"demo.yaml", "train_tiny.yaml", "consistency_policy_tiny.yaml"} <= names


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_small_config_names_no_absolute_path(path):
    absolute = [f"{key}: {value}" for key, value in strings(yaml.safe_load(path.read_text()))
                if value.startswith("/")]
    assert not absolute, f"{path.name} names absolute paths (a fresh clone has none): {absolute}"
