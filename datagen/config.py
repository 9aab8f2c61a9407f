"""Typed configuration for `datagen generate`, loaded from YAML with CLI overrides.

Every model forbids unknown fields, so a typo fails before any work starts with the field's
dotted path; `load_config` turns pydantic's errors into one readable message.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from datagen.envs import available_envs, import_modules, resolve_env
from datagen.teachers.config import TeacherConfig  # backend sections live with the teachers


class ConfigError(ValueError):
    """A config that cannot run; the message names the field and the allowed values."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvConfig(StrictModel):
    name: str = Field(description="registered environment name (sql, fs, enterprise) or "
                                  "`module.path:ClassName` for your own Environment subclass")
    weight: float = Field(1.0, gt=0, description="relative share of tasks drawn from this env")

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        try:
            resolve_env(name)
        except (KeyError, ImportError, AttributeError, TypeError, ValueError) as exc:
            detail = "" if isinstance(exc, KeyError) else f" ({type(exc).__name__}: {exc})"
            raise ValueError(f"unknown environment {name!r}; allowed: "
                             f"{', '.join(available_envs())} or module.path:ClassName"
                             f"{detail}") from None
        return name


NEGATIVE_KINDS = ("type_error", "hallucinated_key", "logical_error")


class NegativesConfig(StrictModel):
    """Hard negatives for every correct tool call of a successful trajectory."""

    enabled: bool = Field(True, description="write the negatives table and its preference pairs")
    kinds: list[Literal["type_error", "hallucinated_key", "logical_error"]] = Field(
        default_factory=lambda: list(NEGATIVE_KINDS), description="core kinds to produce")
    extra_kinds: bool = Field(False, description="also wrong_function and missing_required")
    execute: bool = Field(True, description="verify each logical error in the environment "
                          "(it must change the outcome); off = faster, unverified")
    max_env_checks: int = Field(12, ge=1, description="candidate executions per call")


CRITIC_KINDS = NEGATIVE_KINDS + ("wrong_function", "missing_required")

# The critic runs in the chunk worker's process: backends that live there. vLLM engines are
# Ray actors that play whole episodes; a served vLLM is reached through `openai`.
CRITIC_MODEL_BACKENDS = ("hf", "openai")


class CriticsConfig(StrictModel):
    """Critics (issue 4): injected-error repairs, failed-rollout repairs, safety pairs."""

    enabled: bool = Field(True, description="write the repairs table and repair/safety "
                          "preference pairs")
    backend: Literal["rule", "llm"] = Field("rule", description="rule: deterministic critiques "
                                            "from validator errors and env feedback; llm: a "
                                            "model writes them (critics.llm_critic)")
    llm: TeacherConfig | None = Field(None, description="backend llm: the critic's model, a "
                                      "section shaped like `teacher` with backend hf or openai "
                                      "(for vLLM: `vllm serve` it and use openai); None = the "
                                      "run's teacher when that is hf or openai")
    inject_rate: float = Field(0.5, ge=0, le=1, description="share of successful trajectories "
                               "that get one injected error and its repair")
    kinds: list[Literal["type_error", "hallucinated_key", "logical_error", "wrong_function",
                        "missing_required"]] = Field(default_factory=lambda: list(CRITIC_KINDS),
                                                     description="error kinds to inject")
    repair_failed: bool = Field(True, description="also repair failed rollouts")
    safety_rate: float = Field(0.25, ge=0, le=1, description="share of successful trajectories "
                               "whose world is used for safety pairs")
    safety_per_trajectory: int = Field(2, ge=1, description="safety cases drawn per chosen "
                                       "trajectory (dangerous and benign look-alikes mixed)")

    @model_validator(mode="after")
    def _llm_only_for_llm(self) -> CriticsConfig:
        if self.llm is not None and self.backend != "llm":
            raise ValueError("critics.llm is set but critics.backend is 'rule'; set backend: llm "
                             "or remove it")
        return self


class GenerateConfig(StrictModel):
    """One generation run. Fields marked run-only do not change the data, so they are left out
    of the fingerprint that guards an output directory."""

    out: str = Field("out/demo", description="output directory (run-only); on a multi-node "
                     "cluster it must be a filesystem every node can write")
    num_trajectories: int = Field(1000, ge=1, description="tasks to roll out")
    seed: int = Field(0, ge=0, description="run seed: same seed and config -> same data")
    chunk_size: int = Field(1000, ge=1, le=1_000_000, description="tasks per chunk; a chunk "
                            "is written as one shard per table and is the unit of resume. "
                            "Larger chunks amortise Ray overhead, smaller ones lose less on a kill")
    # env_modules comes before envs: fields validate in order, and the modules must be
    # imported before the environment names they register are checked.
    env_modules: list[str] = Field(default_factory=list, description="modules to import so "
                                   "their @register_env environments can be named in `envs`")
    envs: list[EnvConfig] = Field(default_factory=lambda: [EnvConfig(name=n) for n in
                                  ("sql", "fs", "enterprise")], min_length=1)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)
    negatives: NegativesConfig = Field(default_factory=NegativesConfig)
    critics: CriticsConfig = Field(default_factory=CriticsConfig)
    tokenizer: str | None = Field(None, description="local Hugging Face tokenizer directory; "
                                  "when set, rows get input_ids and per-token span_ids")
    num_workers: int = Field(0, ge=0, description="chunk workers (run-only); 0 = one per CPU")
    max_in_flight: int = Field(2, ge=1, description="chunks queued per worker (run-only)")
    overwrite: bool = Field(False, description="replace an output directory written with a "
                            "different config (run-only)")
    progress: bool = Field(True, description="show a progress bar (run-only)")

    @field_validator("env_modules")
    @classmethod
    def _import(cls, modules: list[str]) -> list[str]:
        for module in modules:
            try:
                import_modules([module])
            except ImportError as exc:
                raise ValueError(f"cannot import {module!r}: {exc}") from None
        return modules

    @model_validator(mode="after")
    def _critic_model(self) -> GenerateConfig:
        critics = self.critics
        if not critics.enabled or critics.backend != "llm":
            return self
        source, where = (critics.llm, "critics.llm") if critics.llm else (self.teacher, "teacher")
        if source.backend not in CRITIC_MODEL_BACKENDS:
            raise ValueError(
                f"critics.backend 'llm' needs a model: {where}.backend is {source.backend!r}; "
                f"set critics.llm to a teacher-style section with backend "
                f"{' or '.join(CRITIC_MODEL_BACKENDS)} (a vLLM model: `vllm serve` it and use "
                f"openai)")
        return self


RUN_ONLY_FIELDS = {"out", "num_workers", "max_in_flight", "overwrite", "progress"}


def fingerprint(config: GenerateConfig) -> str:
    """Hash of every field that changes the data (run-only fields excluded)."""
    payload = config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS)
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _format_errors(error: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}):"]
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        data = data.setdefault(key, {})
        if not isinstance(data, dict):
            raise ConfigError(f"override {dotted}: {key} is not a section")
    data[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """`key.sub=value` with the value read as YAML (so numbers, booleans and lists work)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r} must look like key=value")
    return key.strip(), yaml.safe_load(raw)


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> GenerateConfig:
    """Read YAML (or start from defaults), apply dotted overrides, validate."""
    data: dict[str, Any] = {}
    source = str(path) if path else "defaults"
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a YAML mapping, got {type(data).__name__}")
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, key, value)
    try:
        return GenerateConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
