"""Configs fail before work starts, naming the field and the allowed values."""

from __future__ import annotations

import pytest

from datagen.config import ConfigError, GenerateConfig, fingerprint, load_config, parse_override


def _write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_demo_config_loads():
    config = load_config("configs/demo.yaml")
    assert [env.name for env in config.envs] == ["sql", "fs", "enterprise"]


@pytest.mark.parametrize("text, expected", [
    ("num_trajectoriez: 5\n", ["num_trajectoriez: unknown field"]),
    ("num_trajectories: many\n", ["num_trajectories:", "integer"]),
    ("num_trajectories: 0\n", ["num_trajectories:", "greater than or equal to 1"]),
    ("envs:\n  - name: sql\n  - name: nosuch\n", ["envs.1.name:", "unknown environment 'nosuch'",
                                                   "allowed:", "enterprise, fs, sql"]),
    ("envs:\n  - name: sql\n    weight: -1\n", ["envs.0.weight:"]),
    ("teacher:\n  backend: gpt\n", ["teacher.backend:", "'oracle'"]),
    ("env_modules: [no.such.module]\n", ["env_modules:", "cannot import 'no.such.module'"]),
    ("- just a list\n", ["must be a YAML mapping"]),
])
def test_bad_configs_name_the_field(tmp_path, text, expected):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    for fragment in expected:
        assert fragment in str(info.value)


def test_user_environment_by_module_and_by_path(tmp_path):
    config = load_config(_write(tmp_path, "env_modules: [tests.datagen.toy_envs]\n"
                                          "envs:\n  - name: toy_counter\n"))
    assert config.envs[0].name == "toy_counter"
    config = load_config(_write(tmp_path, "envs:\n  - name: tests.datagen.toy_envs:CounterEnv\n"))
    assert config.envs[0].name.endswith(":CounterEnv")


def test_overrides_and_fingerprint(tmp_path):
    path = _write(tmp_path, "num_trajectories: 10\n")
    key, value = parse_override("teacher.name=oracle-v2")
    config = load_config(path, {key: value, "seed": 4, "out": None})
    assert config.teacher.name == "oracle-v2" and config.seed == 4
    base = GenerateConfig(num_trajectories=10)
    assert fingerprint(base) == fingerprint(base.model_copy(update={"out": "x", "num_workers": 3}))
    assert fingerprint(base) != fingerprint(GenerateConfig(num_trajectories=10, seed=1))
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("seed")
