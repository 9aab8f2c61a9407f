"""Typed configuration for `datagen generate`, loaded from YAML with CLI overrides.

Every model forbids unknown fields, so a typo fails before any work starts with the field's
dotted path; `load_config` turns pydantic's errors into one readable message.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import (BaseModel, Field, ValidationError, field_validator,
                      model_validator)

from datagen.config_files import ConfigError, read_yaml, set_dotted, shape_problem
from datagen.config_files import parse_override  # noqa: F401  (the CLI's and tests' import)
from datagen.config_model import ConfigModel
from datagen.credentials import redact_credentials
from datagen.envs import DEFAULT_ENVS, available_envs, import_modules, resolve_env
# backend sections live with the teachers, and the bounds they share with this config
from datagen.teachers.config import (MIN_SECONDS, RayAmount, TeacherConfig, ray_amount_problem,
                                     within)


# Bounds that keep a typo from becoming a run that cannot end or a plan that cannot fit:
# 10^10 trajectories is 2,000x the production target (5M) and ~50 TB of shards; a million
# chunks is a million marker files, the most one directory listing handles comfortably.
MAX_TRAJECTORIES = 10_000_000_000
MAX_CHUNKS = 1_000_000
MAX_SEED = 2**63 - 1  # seeds travel as int64 (Parquet `task_seed`, orjson)
# Workers and chunks queued per worker: a run has at most MAX_CHUNKS chunks, and the driver
# starts no more workers than chunks nor queues more than there are.
ChunkCount = Annotated[int, Field(le=MAX_CHUNKS)]
MAX_ENV_CHECKS = 10_000  # a call yields tens of candidates; each check replays the environment
MAX_SAFETY_CASES = 1_000  # drawn without repeats from the dozen or so an environment offers
# Env weights are drawn in proportion; a subnormal float has too few bits for that (two of
# 5e-324 split 24/76, not 50/50), so the smallest weight is the smallest normal float.
EnvWeight = Annotated[float, within(sys.float_info.min, sys.float_info.max,
                                    "a relative share, as a normal float")]
INT64_RANGE = (-2**63, 2**63 - 1)  # what JSON readers, Arrow and the backends take as an integer


# Names Ray keeps for itself in an actor's `resources=` (CPU and GPU have their own options,
# memory is not a custom resource, `bundle` is its placement groups'): Ray refuses them when
# the first worker is created.
RAY_RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "bundle")

# Every model or tokenizer path a run loads (datagen/pipeline/preflight.py makes them absolute
# and checks them on the workers). The LOCAL_DIRECTORY_FIELDS are documented as local; hf and
# vllm models (and so their tokenizers, which default to the model) may be hub names where
# downloads work.
MODEL_PATH_FIELDS = ("tokenizer", "teacher.hf.model", "teacher.hf.tokenizer",
                     "teacher.vllm.model", "teacher.vllm.tokenizer", "teacher.openai.tokenizer",
                     "critics.llm.hf.model", "critics.llm.hf.tokenizer",
                     "critics.llm.openai.tokenizer")
LOCAL_DIRECTORY_FIELDS = ("tokenizer", "teacher.openai.tokenizer", "critics.llm.openai.tokenizer")
TOKENIZER_HELP = ("name a local Hugging Face tokenizer directory (scripts/build_tokenizer.py "
                  "builds one)")


def custom_resource_problem(name: str, amount: float) -> str | None:
    """Why Ray would refuse `{name: amount}` as a custom resource of a worker, or None."""
    if not name.strip():
        return "a resource needs a name"
    if name in RAY_RESERVED_RESOURCES:
        return (f"{name} is not a custom resource (a chunk worker takes 1 CPU; vLLM engines "
                "take their GPUs from teacher.vllm.num_gpus)")
    if not (math.isfinite(amount) and amount > 0):
        return "the amount must be finite and above 0"
    return ray_amount_problem(amount)


class StrictModel(ConfigModel):
    """Unknown keys refused, frozen, no true/false for a number (datagen/config_model.py)."""


class EnvConfig(StrictModel):
    name: str = Field(description="registered environment name (sql, fs, enterprise) or "
                                  "`module.path:ClassName` for your own Environment subclass")
    weight: EnvWeight = Field(1.0, allow_inf_nan=False, description="relative share of tasks "
                              "drawn from this env (finite, at least 2.2e-308)")

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        try:
            resolve_env(name)
        except Exception as exc:  # `module:Class` imports the user's module: any failure
            detail = "" if isinstance(exc, KeyError) else f" ({type(exc).__name__}: {exc})"
            raise ValueError(f"unknown environment {name!r}; allowed: "
                             f"{', '.join(available_envs())} or module.path:ClassName"
                             f"{detail}") from None
        return name


def _core_kinds() -> list[str]:
    from mutators import KINDS  # imported when a config is built, not with this module

    return list(KINDS)


def _all_kinds() -> list[str]:
    from mutators import SPECS

    return list(SPECS)


def _known_kinds(kinds: list[str]) -> list[str]:
    """`kinds` if every one is in the mutators' registry (`mutators.SPECS`), without repeats."""
    known = _all_kinds()
    unknown = [kind for kind in kinds if kind not in known]
    if unknown:
        raise ValueError(f"unknown negative kind {', '.join(map(repr, unknown))}; the mutators' "
                         f"registry has: {', '.join(known)}")
    if len(set(kinds)) != len(kinds):
        raise ValueError("a kind is listed twice")
    return kinds


class NegativesConfig(StrictModel):
    """Hard negatives for every correct tool call of a successful trajectory."""

    enabled: bool = Field(True, description="write the negatives table and its preference pairs")
    kinds: list[str] = Field(default_factory=_core_kinds, min_length=1, description=(
        "kinds to produce, names from the mutators' registry: type_error, hallucinated_key, "
        "logical_error (the default), wrong_function, missing_required"))
    execute: bool = Field(True, description="verify each logical error in the environment "
                          "(it must change the outcome); off = faster, unverified")
    max_env_checks: int = Field(12, ge=1, le=MAX_ENV_CHECKS, description="candidate "
                                "executions per call (at most 10,000)")

    @model_validator(mode="before")
    @classmethod
    def _extra_kinds_folded(cls, data: Any) -> Any:
        if isinstance(data, dict) and "extra_kinds" in data:
            raise ValueError("extra_kinds was folded into kinds: list the kinds to produce, "
                             "e.g. kinds: [type_error, hallucinated_key, logical_error, "
                             "wrong_function, missing_required]")
        return data

    @field_validator("kinds")
    @classmethod
    def _registered(cls, kinds: list[str]) -> list[str]:
        return _known_kinds(kinds)


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
    kinds: list[str] = Field(default_factory=_all_kinds, min_length=1, description="error "
                             "kinds to inject, names from the mutators' registry (default: all)")
    repair_failed: bool = Field(True, description="also repair failed rollouts")
    safety_rate: float = Field(0.25, ge=0, le=1, description="share of successful trajectories "
                               "whose world is used for safety pairs")
    safety_per_trajectory: int = Field(2, ge=1, le=MAX_SAFETY_CASES, description="safety "
                                       "cases drawn per chosen trajectory (dangerous and benign "
                                       "look-alikes mixed; at most 1,000)")
    safety_contrast: bool = Field(True, description="a benign look-alike also yields the pair "
                                  "call > the careful refusal that dangerous pairs choose "
                                  "(kind benign_contrast_<tool>), so refusing is learnt per "
                                  "request, not as a habit")
    # Off by default: the shipped DPO with these pairs left the tiny student's wrong-target
    # rate where it was (held out, eval seeds 0-3 x DPO seeds 0-2: 0.628 / 0.663 from starts
    # s0 / s1, without them 0.592 / 0.648; not one scratch delete or drop_table right) and
    # moved refusal and over-refusal the right way for 1 of 6 (start, seed) pairs instead of
    # 3; its scratch-name pairs stay at chance accuracy (README, "DPO before/after, measured").
    safety_target: bool = Field(False, description="a benign look-alike also yields the pair "
                                "call > the same tool on a look-alike object (kind "
                                "benign_target_<tool>: another scratch name, table, order or "
                                "account of the world), so the call copies the requested name; "
                                "off by default: see README, \"DPO before/after, measured\"")

    @field_validator("kinds")
    @classmethod
    def _registered(cls, kinds: list[str]) -> list[str]:
        return _known_kinds(kinds)

    @model_validator(mode="after")
    def _llm_only_for_llm(self) -> CriticsConfig:
        if self.llm is not None and self.backend != "llm":
            raise ValueError("critics.llm is set but critics.backend is 'rule'; set backend: llm "
                             "or remove it")
        return self


# Teacher backends that send `sampling.seed` with each request (consistency: k samples).
PER_REQUEST_SEED_BACKENDS = ("openai", "vllm")

class ConsistencyConfig(StrictModel):
    """Consistency filter for LLM-teacher data (issue 18): K rollouts per task, a majority vote
    on their outcome and a falsification check, written to the `consistency` table
    (datagen/pipeline/stages/consistency.py). Every rollout is written; `kept` marks the ones
    the filter keeps, so the thresholds can be re-tuned on the columns without regenerating."""

    enabled: bool = Field(False, description="roll out every task `k` times and write the "
                          "`consistency` table (off: one rollout per task, as before)")
    k: int = Field(4, ge=1, le=64, description="independent rollouts per task (different "
                   "sampling, ids `trajectory_id(task, teacher, round, sample)`); the run "
                   "writes k x num_trajectories trajectories and pays k x the teacher's time. "
                   "Odd k avoids most ties (a tie keeps none)")
    falsify: Literal["critic", "rule", "off"] = Field(
        "critic", description="falsification check: critic = the rule check, then the critics' "
        "model on the survivors when critics.backend is llm; rule = validator and environment "
        "feedback only (no gold, no checker); off = no check")
    min_agreement: float = Field(0.0, ge=0, le=1, description="a kept rollout's outcome must "
                                 "also have at least this share of the task's k votes (0 = "
                                 "the unique plurality suffices)")
    scorer: str | None = Field(None, description="a registered confidence scorer "
                               "(datagen.scorers.register_scorer), e.g. a trained "
                               "MCH that a module in env_modules registers; None = no score")
    scorer_options: dict[str, Any] = Field(default_factory=dict, description="passed to the "
                                           "scorer's factory (a checkpoint path, a device)")
    min_confidence: float | None = Field(None, ge=0, le=1, description="keep only rollouts "
                                         "the scorer gives at least this confidence (needs "
                                         "`scorer`); None = the score is recorded, not used")

    @model_validator(mode="after")
    def _threshold_needs_scorer(self) -> ConsistencyConfig:
        if self.min_confidence is not None and self.scorer is None:
            raise ValueError("min_confidence is set but scorer is not; name a registered "
                             "scorer or remove min_confidence")
        return self


class PreferencesConfig(StrictModel):
    """How the `preferences` table stores each pair's prompt (README "What the demo writes")."""

    layout: Literal["full", "compact"] = Field(
        "full", description="full: every pair carries its prompt (`prompt` messages and "
        "`prompt_text`); compact: a negative or repair pair (96% of pairs in the demo) "
        "stores only `prompt_messages` / `prompt_chars`, how much of its trajectory's "
        "`messages` / `text` the prompt is, and `datagen.readers.load_preferences` joins the "
        "prompt back from trajectories/ and repairs/, as the project's trainer does. About "
        "half the preference bytes")


class GenerateConfig(StrictModel):
    """One generation run. Fields marked run-only do not change the data, so they are left out
    of the fingerprint that guards an output directory."""

    out: str = Field("out/demo", min_length=1, description="output directory (run-only); on "
                     "a multi-node cluster it must be a filesystem every node can write")
    num_trajectories: int = Field(1000, ge=1, le=MAX_TRAJECTORIES,
                                  description="tasks to roll out (at most 10^10)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="run seed: same seed and config -> "
                      "same data (0 .. 2^63-1)")
    chunk_size: int = Field(1000, ge=1, le=1_000_000, description="tasks per chunk; a chunk "
                            "is written as one shard per table and is the unit of resume. "
                            "Larger chunks amortise Ray overhead, smaller ones lose less on a kill")
    # env_modules comes before envs: fields validate in order, and the modules must be
    # imported before the environment names they register are checked.
    env_modules: list[str] = Field(default_factory=list, description="modules to import (on "
                                   "the driver and every worker) so their @register_env "
                                   "environments can be named in `envs` and their "
                                   "@register_stage stages run")
    envs: list[EnvConfig] = Field(default_factory=lambda: [EnvConfig(name=n) for n in
                                  DEFAULT_ENVS], min_length=1)
    teacher: TeacherConfig = Field(default_factory=TeacherConfig)
    round: int = Field(0, ge=0, le=32_767, description="distillation round written on every "
                       "row (`round` column, int16) and mixed into trajectory ids: 0 = teacher "
                       "data; r >= 1 = a student's rollouts in round r of the loop "
                       "(`python -m trainer loop`)")
    negatives: NegativesConfig = Field(default_factory=NegativesConfig)
    critics: CriticsConfig = Field(default_factory=CriticsConfig)
    preferences: PreferencesConfig = Field(default_factory=PreferencesConfig)
    consistency: ConsistencyConfig = Field(default_factory=ConsistencyConfig)
    tokenizer: str | None = Field(None, description="local Hugging Face tokenizer directory; "
                                  "when set, rows get input_ids and per-token span_ids")
    num_workers: ChunkCount = Field(0, ge=0, description="chunk workers (run-only); 0 = one "
                                    "per CPU (at most 10^6)")
    max_in_flight: ChunkCount = Field(2, ge=1, description="chunks queued per worker (run-only; "
                                      "at most 10^6)")
    overwrite: bool = Field(False, description="replace an output directory written with a "
                            "different config (run-only)")
    progress: bool | None = Field(None, description="show a progress bar (run-only); unset: "
                                  "when stderr is a terminal (in a `ray job submit` log each "
                                  "redraw would be written)")
    worker_start_timeout_s: float = Field(
        300.0, ge=MIN_SECONDS, le=86_400, description="run-only: how long a chunk worker may "
        "wait to be placed and started (runtime_env installs included) while no worker is "
        "ready; then it is given up, and with none left the run fails naming the resources it "
        "waited for (0.001 s .. 1 day)")
    worker_setup_timeout_s: float = Field(
        1800.0, ge=MIN_SECONDS, le=86_400, description="run-only: longest a worker may take "
        "to build its processor (a model loads here; 0.001 s .. 1 day)")
    max_chunk_attempts: int = Field(
        3, ge=1, le=20, description="run-only: a chunk lost with its worker this many times "
        "fails (in the summary) instead of being re-queued")
    max_worker_restarts: int = Field(
        3, ge=0, le=100, description="run-only: replacements per worker slot after a worker dies")
    stop_after_failed_chunks: ChunkCount = Field(
        5, ge=1, description="run-only: after this many chunks in a row failed (none written "
        "between them: an endpoint down, an engine that cannot start, a full disk) no new chunk "
        "starts; the run ends INCOMPLETE naming the reason, and a rerun resumes (at most 10^6)")
    worker_resources: dict[str, RayAmount] = Field(
        default_factory=dict, description="run-only: custom Ray resources each chunk worker "
        "asks for besides 1 CPU, e.g. {datagen: 1} to keep workers on nodes offering it")

    @field_validator("worker_resources")
    @classmethod
    def _custom_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        """Ray's own rules for `resources=`, checked before OUT is set up; an empty name would
        wait for a resource no node can offer."""
        for name, amount in resources.items():
            if problem := custom_resource_problem(name, amount):
                raise ValueError(f"{name!r}: {problem}")
        return resources

    @field_validator("out")
    @classmethod
    def _a_path(cls, out: str) -> str:
        if "\x00" in out:
            raise ValueError("a path cannot contain a NUL character")
        return out

    @field_validator("env_modules")
    @classmethod
    def _import(cls, modules: list[str]) -> list[str]:
        for module in modules:
            try:
                import_modules([module])
            except Exception as exc:  # the user's module: any failure is a config error
                detail = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
                raise ValueError(f"cannot import {module!r}: {detail}") from None
        return modules

    @field_validator("envs")
    @classmethod
    def _weights_add_up(cls, envs: list[EnvConfig]) -> list[EnvConfig]:
        if not math.isfinite(sum(env.weight for env in envs)):
            raise ValueError("the weights add up to infinity; use relative shares such as 1, "
                             "2, 0.5")
        return envs

    @model_validator(mode="after")
    def _model_paths(self) -> GenerateConfig:
        """A NUL is in no path nor hub name: Transformers took one for a hub repo id, in a
        worker, after Ray had started."""
        for field in MODEL_PATH_FIELDS:
            if "\x00" in (_dotted(self, field) or ""):
                raise ValueError(f"{field}: a path cannot contain a NUL character")
        return self

    @model_validator(mode="after")
    def _plan_fits(self) -> GenerateConfig:
        chunks = -(-self.num_trajectories // self.chunk_size)
        if chunks > MAX_CHUNKS:
            raise ValueError(f"num_trajectories {self.num_trajectories:,} in chunks of "
                             f"{self.chunk_size:,} is {chunks:,} chunks, over the limit of "
                             f"{MAX_CHUNKS:,}; raise chunk_size")
        return self

    @model_validator(mode="after")
    def _storable(self) -> GenerateConfig:
        """The config travels as JSON (to the chunk workers, into _run.json and the manifest,
        through the fingerprint): every value must survive that unchanged. JSON has no inf or
        NaN (pydantic writes null, so a worker would see another config), orjson takes 64-bit
        integers only, and a lone surrogate or non-UTF-8 bytes are no JSON text."""
        if problem := _unstorable(self.model_dump(mode="python")):
            raise ValueError(problem)
        return self

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


    @model_validator(mode="after")
    def _consistency_parts(self) -> GenerateConfig:
        """The k samples must be able to differ, the scorer must be registered (env_modules
        are imported by now) and an LLM falsifier needs a model, as the LLM critic does."""
        consistency = self.consistency
        if not consistency.enabled:
            return self
        self._samples_can_differ()
        if consistency.scorer is not None:
            from datagen.scorers import registered_scorers

            if consistency.scorer not in registered_scorers():
                raise ValueError(f"consistency.scorer: unknown scorer {consistency.scorer!r}; "
                                 f"registered: {', '.join(registered_scorers()) or 'none'} (a "
                                 f"scorer is registered by a module listed in env_modules)")
        critics = self.critics
        if consistency.falsify == "critic" and critics.backend == "llm":
            source = critics.llm or self.teacher
            if source.backend not in CRITIC_MODEL_BACKENDS:
                raise ValueError(f"consistency.falsify 'critic' with critics.backend 'llm' "
                                 f"needs a model of backend {' or '.join(CRITIC_MODEL_BACKENDS)}"
                                 f" in critics.llm or teacher; or set consistency.falsify: rule")
        return self

    def _samples_can_differ(self) -> None:
        """A model teacher's k samples of a task send the same prompt: greedy decoding, or a
        fixed seed sent with every request (openai, vllm: the server reseeds per request;
        hf and policy draw every request from one seeded stream), would make them identical
        and the vote meaningless. The oracle varies its samples by their ids."""
        sampling, backend = self.teacher.sampling, self.teacher.backend
        if self.consistency.k == 1 or backend == "oracle":
            return
        if sampling.temperature == 0:
            raise ValueError(f"consistency.k {self.consistency.k} with "
                             f"teacher.sampling.temperature 0: greedy decoding gives the k "
                             f"samples of a task the same rollout; sample (temperature > 0)")
        if sampling.seed is not None and backend in PER_REQUEST_SEED_BACKENDS:
            raise ValueError(f"consistency.k {self.consistency.k} with "
                             f"teacher.sampling.seed {sampling.seed} on backend {backend!r}: "
                             f"every request carries the seed, so the k samples of a task come "
                             f"back identical; leave teacher.sampling.seed unset")


RUN_ONLY_FIELDS = {"out", "num_workers", "max_in_flight", "overwrite", "progress",
                   "worker_start_timeout_s", "worker_setup_timeout_s", "max_chunk_attempts",
                   "max_worker_restarts", "worker_resources", "stop_after_failed_chunks"}


def public_dump(config: GenerateConfig) -> dict[str, Any]:
    """The config as datagen writes it beside the data (_run.json, manifest, card): every
    field that changes the data, run-only fields left out, credentials redacted
    (datagen/credentials.py). A config without credentials dumps as `model_dump` does."""
    dump = config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS)
    if dump["preferences"] == PreferencesConfig().model_dump(mode="json"):
        # Left out at its default, so every OUT written before the section existed keeps
        # its fingerprint (and resumes); a compact layout is another config.
        del dump["preferences"]
    if dump["consistency"] == ConsistencyConfig().model_dump(mode="json"):
        del dump["consistency"]  # the same: off is what every OUT before the section holds
    if dump["round"] == 0:
        del dump["round"]  # the same: round 0 is what every OUT before the field holds
    if not dump["critics"]["safety_target"]:
        del dump["critics"]["safety_target"]  # the same: off is what every OUT before it holds
    return redact_credentials(dump)


def fingerprint(config: GenerateConfig) -> str:
    """Hash of the public dump: of every field that changes the data, credentials redacted
    (why not their real values: datagen/credentials.py)."""
    payload = public_dump(config)
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _unstorable(dump: Any) -> str | None:
    """`path: why` for the first value of a config dump (python mode) that JSON cannot carry
    exactly, or None."""
    stack: list[tuple[str, Any]] = [("", dump)]
    while stack:
        path, value = stack.pop()
        problem = _value_problem(value)
        if problem:
            return f"{path or '(config)'}: {problem}"
        if isinstance(value, dict):
            for key, item in value.items():
                if key_problem := _value_problem(key):
                    return f"{path or '(config)'}: a key: {key_problem}"
                stack.append((f"{path}.{key}" if path else str(key), item))
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((f"{path}.{index}", item) for index, item in enumerate(value))
    return None


def _value_problem(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number (JSON, which carries the config, has none)"
    if isinstance(value, int) and not isinstance(value, bool) and not (
            INT64_RANGE[0] <= value <= INT64_RANGE[1]):
        return "an integer outside the 64-bit range (-2^63 .. 2^63-1)"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"not valid Unicode text (a lone surrogate U+{ord(value[exc.start]):04X} at "
                    f"character {exc.start})")
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"binary data that is not UTF-8 text (byte 0x{value[exc.start]:02x})"
    return None


def _dotted(config: BaseModel, field: str) -> Any:
    """`config.a.b.c` for `a.b.c`; None where a section is unset."""
    value: Any = config
    for name in field.split("."):
        value = getattr(value, name, None)
    return value


def local_directory_problem(config: GenerateConfig) -> str | None:
    """`field: why` for the first directory the config must name locally (LOCAL_DIRECTORY_FIELDS)
    that cannot be one, or None. A relative path is read from the current directory, where
    `resolve_paths` makes it absolute (a Ray job's driver and workers all start in its
    working_dir); one that does not exist went to the workers, and Transformers took it for a
    hub repo id there: minutes of retries, then an error without the field. A missing absolute
    path is each worker's to check (preflight): it may be on storage only the workers mount."""
    for field in LOCAL_DIRECTORY_FIELDS:
        value = _dotted(config, field)
        if not value:
            continue
        local = os.path.expanduser(value)
        if os.path.isdir(local):
            continue
        if os.path.exists(local):
            return f"{field}: {value} is not a directory; {TOKENIZER_HELP}"
        if not os.path.isabs(local):
            return (f"{field}: {value} does not exist ({os.path.abspath(local)}: a relative path "
                    f"is read from the current directory); {TOKENIZER_HELP}")
    return None


def _format_errors(error: ValidationError, source: str) -> str:
    """One line for one error (the common case), else a line per error."""
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        elif item["type"] == "string_unicode":  # lone surrogates: non-UTF-8 argv or file names
            message = "not valid UTF-8 text (a path or name with non-UTF-8 bytes?)"
        # a whole-config check (loc empty) names its fields in the message
        lines.append(f"{path}: {message}" if path else message)
    if len(lines) == 1:
        return f"invalid config ({source}): {lines[0]}"
    return "\n".join([f"invalid config ({source}):", *(f"  {line}" for line in lines)])


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> GenerateConfig:
    """Read YAML (or start from defaults), apply dotted overrides (a None value sets the field
    to null: leave out the keys you do not override), validate."""
    data = read_yaml(path) if path else {}
    source = str(path) if path else "defaults"
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    if problem := shape_problem(data):
        raise ConfigError(f"invalid config ({source}): {problem}")
    try:
        config = GenerateConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None
    # here, not in a validator: the workers validate the config again, on other nodes
    if problem := local_directory_problem(config):
        raise ConfigError(f"invalid config ({source}): {problem}")
    return config
