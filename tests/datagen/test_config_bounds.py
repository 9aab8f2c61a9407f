"""Hostile numbers in float settings fail at load, naming the field (before, each passed and
then hung the run, failed every row or wrote null; the finding is beside each case)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from datagen.config import ConfigError, load_config
from datagen.pipeline.cli import main
from tests.schema_numbers import schema_numbers

OPENAI = {"teacher.backend": "openai", "teacher.openai.base_url": "http://127.0.0.1:9/v1",
          "teacher.openai.model": "m"}
VLLM = {"teacher.backend": "vllm", "teacher.vllm.model": "m"}
NAMED = {"worker_resources.datagen": "worker_resources", "worker_resources.x": "worker_resources",
         "envs": "envs.0.weight"}  # else the field


@pytest.mark.parametrize("section, field, value, expected", [
    # 1e300: a hung endpoint is waited on forever; 1e-300: every row generation_failed, exit 0
    (OPENAI, "teacher.openai.timeout_s", 1e300, "1e+300 is outside [0.001, 604800]"),
    (OPENAI, "teacher.openai.timeout_s", 1e-300, "1e-300 is outside [0.001, 604800]"),
    # slept forever on the first 503: the run hung
    (OPENAI, "teacher.openai.backoff_base_s", 1e300, "is outside [0.001, 604800] (seconds"),
    (OPENAI, "teacher.openai.backoff_max_s", 1e300, "is outside [0.001, 604800]"),
    (OPENAI, "teacher.openai.backoff_max_s", 1e-300, "is outside [0.001, 604800]"),
    # 2**1024 in the backoff: every row OverflowError
    (OPENAI, "teacher.openai.max_retries", 1100, "less than or equal to 1000"),
    # cost_usd inf in every row, written as null
    (OPENAI, "teacher.openai.usd_per_million_input_tokens", 1e308, "is outside [0, 1e+06]"),
    (OPENAI, "teacher.openai.usd_per_million_output_tokens", 1e300, "is outside [0, 1e+06]"),
    # Ray's ValueError in the chunk worker failed every chunk; 1e300 was never placed (hung)
    (VLLM, "teacher.vllm.num_cpus", 1e-300, "Ray counts resources in units of 0.0001"),
    (VLLM, "teacher.vllm.num_cpus", 1e300, "more than Ray lets a node offer"),
    (VLLM, "teacher.vllm.num_gpus", 1e300, "more than Ray lets a node offer"),
    (VLLM, "teacher.vllm.num_gpus", 1.5, "more than 1 GPU only as a whole number"),
    ({}, "worker_resources.datagen", 1e300, "'datagen': over 1e+14"),
    # the chunk workers' waits for the engines: 0 gave up on every engine at once, 1e300
    # waited forever on one never placed
    (VLLM, "teacher.vllm.place_timeout_s", 0, "0 is outside [0.001, 604800] (seconds"),
    (VLLM, "teacher.vllm.place_timeout_s", -5, "-5 is outside [0.001, 604800]"),
    (VLLM, "teacher.vllm.place_timeout_s", 1e300, "1e+300 is outside [0.001, 604800]"),
    (VLLM, "teacher.vllm.start_timeout_s", 0, "0 is outside [0.001, 604800] (seconds"),
    (VLLM, "teacher.vllm.start_timeout_s", -1800, "-1800 is outside [0.001, 604800]"),
    (VLLM, "teacher.vllm.start_timeout_s", 1e300, "1e+300 is outside [0.001, 604800]"),
    # workers given up at once, after Ray was started
    ({}, "worker_start_timeout_s", 1e-300, "greater than or equal to 0.001"),
    ({}, "worker_setup_timeout_s", 1e-300, "greater than or equal to 0.001"),
    # subnormal: two equal weights of 5e-324 drew 24/76, not 50/50
    ({}, "envs", [{"name": "sql", "weight": 5e-324}], "4.94066e-324 is outside [2.22507e-308"),
])
def test_hostile_numbers_fail_at_load_naming_the_field(section, field, value, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, {**section, field: value})
    message = str(info.value)
    assert f"{NAMED.get(field, field)}: " in message, message
    assert expected in message, message


def test_logit_bias_within_the_openai_range_and_token_ids_not_negative():
    # hf: 1e300 on float32 logits became inf, every turn failed in torch.multinomial
    with pytest.raises(ConfigError, match=r"teacher\.sampling\.logit_bias\.5: 1e\+300 is "
                                          r"outside \[-100, 100\]"):
        load_config(None, {"teacher.sampling.logit_bias": {5: 1e300}})
    with pytest.raises(ConfigError, match=r"teacher\.sampling\.logit_bias\.-1\.\[key\]: "
                                          r"Input should be greater than or equal to 0"):
        load_config(None, {"teacher.sampling.logit_bias": {-1: 5.0}})


def test_non_finite_values_keep_the_finite_number_message():
    with pytest.raises(ConfigError, match="teacher.openai.timeout_s: inf is not a finite"):
        load_config(None, {**OPENAI, "teacher.openai.timeout_s": float("inf")})
    with pytest.raises(ConfigError, match="teacher.vllm.num_gpus: inf is not a finite"):
        load_config(None, {**VLLM, "teacher.vllm.num_gpus": float("inf")})


def test_the_bounds_themselves_load():
    config = load_config(None, {
        **OPENAI, "teacher.openai.timeout_s": 0.001, "teacher.openai.backoff_max_s": 604800,
        "teacher.openai.max_retries": 1000, "teacher.openai.usd_per_million_input_tokens": 1e6,
        "teacher.sampling.logit_bias": {0: -100, 7: 100.0}, "worker_start_timeout_s": 0.001,
        "envs": [{"name": "sql", "weight": 2.2250738585072014e-308}, {"name": "fs"}]})
    assert config.teacher.openai.backoff_max_s == 604800
    for gpus, cpus in [(0, 0), (0.0001, 0.5), (2, 1.5), (1e14, 1e14)]:
        vllm = load_config(None, {**VLLM, "teacher.vllm.num_gpus": gpus,
                                  "teacher.vllm.num_cpus": cpus}).teacher.vllm
        assert (vllm.num_gpus, vllm.num_cpus) == (gpus, cpus)


def test_the_vllm_engine_waits_default_to_5_and_30_minutes_and_take_their_bounds():
    defaults = load_config(None, VLLM).teacher.vllm
    assert (defaults.place_timeout_s, defaults.start_timeout_s) == (300, 1800)
    vllm = load_config(None, {**VLLM, "teacher.vllm.place_timeout_s": 0.001,
                              "teacher.vllm.start_timeout_s": 604800}).teacher.vllm
    assert (vllm.place_timeout_s, vllm.start_timeout_s) == (0.001, 604800)


def test_ray_rules_are_rays_own():
    from ray._private import ray_constants

    from datagen.teachers.config import RAY_MAX_RESOURCE, RAY_RESOURCE_UNIT

    assert RAY_RESOURCE_UNIT == ray_constants.MIN_RESOURCE_GRANULARITY
    assert RAY_MAX_RESOURCE == ray_constants.MAX_RESOURCE_QUANTITY


@pytest.mark.parametrize("setting", ["teacher.openai.backoff_base_s=1e300",
                                     "teacher.vllm.num_cpus=1e300"])
def test_cli_says_it_in_one_line_before_ray(tmp_path, capsys, monkeypatch, setting):
    import datagen.pipeline.driver

    def refuse(*args, **kwargs):
        raise AssertionError("reached Ray: the error was not caught before the run")

    monkeypatch.setattr(datagen.pipeline.driver, "init_ray", refuse)
    section = setting.split(".")[1]
    backend = [f"teacher.backend={section}", f"teacher.{section}.model=m"]
    if section == "openai":
        backend.append("teacher.openai.base_url=http://127.0.0.1:9/v1")
    sets = [arg for value in [*backend, setting] for arg in ("--set", value)]
    rc = main(["generate", "--config", "configs/demo.yaml", "--out", str(tmp_path / "out"),
               *sets])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("datagen: ") and setting.split("=")[0] + ":" in err, err
    assert not (tmp_path / "out").exists()


def test_a_real_cli_process_exits_2_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "datagen", "generate", "--config", "configs/demo.yaml", "--out",
         str(tmp_path / "out"), "--set", "teacher.sampling.logit_bias={5: 1e300}",
         "--address", "127.0.0.1:9"],  # had it passed: no Ray there, so nothing would run
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("datagen: invalid config (configs/demo.yaml): teacher.sampling."
                                   "logit_bias.5: 1e+300 is outside [-100, 100] (the OpenAI "
                                   "API's range)")
    assert not (tmp_path / "out").exists()


# Every integer setting has an upper bound too. Before, a value inside int64 (2**31, 2**63-1)
# loaded and then did what the finding beside it says; above int64 the one-line message came
# from the JSON check (`an integer outside the 64-bit range`), which names the field as well.
HF = {"teacher.backend": "hf", "teacher.hf.model": "m"}
CRITIC = {"critics.backend": "llm", "critics.llm": {"backend": "openai", "openai": {
    "base_url": "http://127.0.0.1:9/v1", "model": "m"}}}


@pytest.mark.parametrize("section, field, value, bound", [
    # [{"GPU": 1, "CPU": 1}] * tensor_parallel_size: every chunk FAILED: MemoryError, exit 1
    (VLLM, "teacher.vllm.tensor_parallel_size", 2**63 - 1, 1024),
    # each chunk worker created engine actors one by one: the run hung, no chunk in 120 s
    (VLLM, "teacher.vllm.num_engines", 2**31, 100_000),
    # refused by vLLM when the engine started: every chunk FAILED with pydantic's
    # "For further information visit ..." line, exit 1
    (VLLM, "teacher.vllm.max_model_len", 2**31, 2**24),
    (VLLM, "teacher.vllm.cpu_kv_cache_gib", 2**31, 2**20),  # 2^31 GiB asked of vLLM (not run)
    # these loaded and ran as if unbounded: the setting meant nothing
    (OPENAI, "teacher.openai.max_concurrency", 2**63 - 1, 65_536),
    (OPENAI, "teacher.openai.initial_concurrency", 2**31, 65_536),
    (OPENAI, "teacher.openai.min_concurrency", 2**31, 65_536),
    ({}, "teacher.episode.max_turns", 2**63 - 1, 1024),
    ({}, "teacher.episode.max_total_tokens", 2**63 - 1, 2**24),
    ({}, "teacher.episode.max_concurrent_episodes", 2**31, 65_536),
    (HF, "teacher.hf.max_batch_size", 2**31, 65_536),
    ({}, "num_workers", 2**31, 1_000_000),
    ({}, "max_in_flight", 2**63 - 1, 1_000_000),
    ({}, "negatives.max_env_checks", 2**31, 10_000),
    ({}, "critics.safety_per_trajectory", 2**63 - 1, 1_000),
    (CRITIC, "critics.llm.openai.max_concurrency", 2**31, 65_536),
    ({}, "teacher.sampling.seed", 2**63, 2**63 - 1),
])
def test_hostile_integers_fail_at_load_naming_the_field(section, field, value, bound):
    with pytest.raises(ConfigError) as info:
        load_config(None, {**section, field: value})
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert f"{field}: Input should be less than or equal to {bound}" in message, message


def test_token_ids_past_any_vocabulary_fail_at_load():
    with pytest.raises(ConfigError, match=r"teacher\.sampling\.logit_bias\.16777216\.\[key\]: "
                                          r"Input should be less than or equal to 16777215"):
        load_config(None, {"teacher.sampling.logit_bias": {2**24: 5.0}})


def test_the_integer_bounds_themselves_load():
    teacher = load_config(None, {
        **VLLM, "teacher.vllm.tensor_parallel_size": 1024, "teacher.vllm.num_engines": 100_000,
        "teacher.vllm.max_model_len": 2**24, "teacher.vllm.cpu_kv_cache_gib": 2**20,
        "teacher.episode.max_turns": 1024, "teacher.episode.max_total_tokens": 2**24,
        "teacher.episode.max_concurrent_episodes": 65_536, "teacher.sampling.seed": -2**63,
        "teacher.sampling.logit_bias": {2**24 - 1: 1.0}}).teacher
    assert (teacher.vllm.tensor_parallel_size, teacher.episode.max_turns) == (1024, 1024)
    config = load_config(None, {
        **OPENAI, "teacher.openai.max_concurrency": 65_536,
        "teacher.openai.initial_concurrency": 65_536, "teacher.openai.min_concurrency": 65_536,
        "num_workers": 1_000_000, "max_in_flight": 1_000_000, "negatives.max_env_checks": 10_000,
        "critics.safety_per_trajectory": 1_000, "teacher.sampling.seed": 2**63 - 1})
    assert (config.teacher.openai.min_concurrency, config.max_in_flight) == (65_536, 1_000_000)


def test_every_number_of_the_datagen_config_has_an_upper_bound():
    """Checked for every field, not the ones an audit named. A validator's bound (temperature,
    seconds, Ray amounts) is written into the schema beside it, so the walk sees it."""
    from datagen.config import GenerateConfig

    numbers = schema_numbers(GenerateConfig)
    # the walk reaches sections, `int | None`, lists, dict values and critics.llm's teacher
    assert {"teacher.vllm.cpu_kv_cache_gib", "envs.weight", "teacher.sampling.logit_bias",
            "worker_resources", "critics.llm.openai.max_concurrency"} <= set(numbers)
    unbounded = [path for path, item in numbers.items()
                 if "maximum" not in item and "exclusiveMaximum" not in item]
    assert unbounded == []
    too_wide = [path for path, item in numbers.items()
                if item["type"] == "integer" and not item["maximum"] <= 2**63 - 1]
    assert too_wide == []


def test_the_schema_bounds_are_the_ones_enforced():
    """A maximum written into the schema beside a validator is that validator's: one past it
    (or the next float) is refused."""
    import math

    for section, field, maximum in [
            ({}, "teacher.sampling.temperature", 100.0),
            (OPENAI, "teacher.openai.timeout_s", 604800.0),
            (VLLM, "teacher.vllm.num_cpus", 1e14), ({}, "worker_resources.x", 1e14)]:
        load_config(None, {**section, field: maximum})
        with pytest.raises(ConfigError) as info:
            load_config(None, {**section, field: math.nextafter(maximum, math.inf)})
        assert f"{NAMED.get(field, field)}: " in str(info.value), info.value


def test_the_shipped_datagen_configs_load():
    """Every bound above leaves the shipped configs valid (consistency_policy_tiny imports
    the trainer's policy backend: most of this test's time)."""
    from tests.conftest import ROOT

    names = ["demo", "critics_demo", "consistency_policy_tiny", "teacher_hf_tiny",
             "teacher_openai", "teacher_vllm_qwen2_5_32b", "teacher_vllm_tiny_cpu"]
    for name in names:
        load_config(ROOT / "configs" / f"{name}.yaml")


def test_cli_says_a_hostile_integer_in_one_line_before_ray(tmp_path, capsys, monkeypatch):
    import datagen.pipeline.driver

    def refuse(*args, **kwargs):
        raise AssertionError("reached Ray: the error was not caught before the run")

    monkeypatch.setattr(datagen.pipeline.driver, "init_ray", refuse)
    rc = main(["generate", "--config", "configs/demo.yaml", "--out", str(tmp_path / "out"),
               "--set", "teacher.episode.max_turns=9223372036854775807"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err == ("datagen: invalid config (configs/demo.yaml): teacher.episode.max_turns: "
                   "Input should be less than or equal to 1024"), err
    assert not (tmp_path / "out").exists()
