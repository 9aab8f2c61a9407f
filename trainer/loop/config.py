"""Typed configuration of the iterative distillation loop (`python -m trainer loop --config
FILE --set key=value`).

One section per phase of a round: `round0` (teacher data and the first student), `student`
(how the previous round's student plays fresh tasks), `critic` (who writes the repairs of its
failures), `train` (the SAD run of every round, from a `trainer fit` config), `dpo` (optional,
on the round's repair pairs), `eval` (the same held-out tasks every round) and `stop`. Paths
inside are kept as written; the loop resolves them against the working directory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, model_validator

from datagen.teachers.config import Temperature
from trainer.config import (MAX_BATCH, MAX_NEW_TOKENS, MAX_SEED, MAX_TURNS, MAX_WORKERS, Count,
                            PathText, Seed, StrictModel, load_model)



class RoundZeroConfig(StrictModel):
    """Round 0: teacher data -> SAD -> eval. Either part may be taken from an earlier run."""

    generate: PathText | None = Field(None, description="datagen config (YAML) of the teacher data; "
                                 "its `out` is replaced by OUT/round-000/data. Also the base "
                                 "of every student round's generation config (envs, "
                                 "env_modules, critic kinds)")
    generate_set: dict[str, Any] = Field(default_factory=dict, description="dotted overrides "
                                         "of the datagen config, e.g. {num_trajectories: 48}")
    data: PathText | None = Field(None, description="an existing teacher OUT used as round 0's data "
                             "instead of generating (read only); `generate` is then optional "
                             "and the base config is read from its manifest")
    checkpoint: PathText | None = Field(None, description="an existing checkpoint (or run dir) "
                                   "used as round 0's student instead of training one: saves "
                                   "the round-0 fit when a recipe run exists")

    @model_validator(mode="after")
    def _a_source(self) -> "RoundZeroConfig":
        if self.generate is None and self.data is None:
            raise ValueError("round0 needs `generate` (a datagen config) or `data` (an OUT)")
        if self.generate_set and self.generate is None:
            raise ValueError("round0.generate_set needs round0.generate")
        return self


class StudentConfig(StrictModel):
    """How round r's student (the round r-1 checkpoint) plays fresh tasks: a datagen run whose
    teacher backend is `policy` on that checkpoint, its rows marked `round = r`."""

    num_tasks: int = Field(48, ge=1, le=10_000_000, description="fresh tasks played per round; "
                           "only the failed ones become repairs, so a strong student needs more")
    envs: tuple[str, ...] | None = Field(None, min_length=1, description="environments the "
                                         "student plays (None = round 0's, with its weights)")
    chunk_size: Count = Field(48, ge=1, description="tasks per generation chunk (unit of resume)")
    num_workers: int = Field(1, ge=1, le=MAX_WORKERS, description="chunk workers, each holding a copy of the "
                             "student (1 CPU each)")
    seed_stride: int = Field(1, ge=1, le=MAX_SEED, description="round r's generation seed is round 0's seed "
                             "+ r * seed_stride: another run seed, so tasks (ids and seeds) "
                             "that no earlier round trained on; held-out eval tasks live in a "
                             "space no run seed reaches (trainer.heldout)")
    max_turns: int = Field(6, ge=1, le=MAX_TURNS, description="assistant turns per episode")
    max_tokens_per_turn: int = Field(128, ge=1, le=MAX_NEW_TOKENS, description="token budget per turn (a turn "
                                     "that hits it is truncated: a failed step)")
    temperature: Temperature = Field(0.7, ge=0, description="sampling temperature; 0 = greedy (the "
                               "same failure on every try of a task)")
    on_invalid_turn: Literal["stop", "feedback"] = Field(
        "stop", description="stop = a malformed turn ends the episode (its first wrong step is "
        "the one repaired); feedback = the student sees the error and goes on")
    max_batch_size: int = Field(8, ge=1, le=4096, description="episodes decoded together per worker")


class CriticConfig(StrictModel):
    """Who writes the critiques and corrected calls of the student's failures."""

    backend: Literal["rule", "llm"] = Field("rule", description="rule: from the validator "
                                            "error, the env's feedback and the task's gold "
                                            "call (the oracle); llm: a model (the teacher)")
    llm: dict[str, Any] | None = Field(None, description="backend llm: a teacher-shaped section "
                                       "(backend hf or openai; datagen's critics.llm); the "
                                       "student itself is never the critic")

    @model_validator(mode="after")
    def _llm(self) -> "CriticConfig":
        if self.backend == "llm" and self.llm is None:
            raise ValueError("critic.backend 'llm' needs critic.llm (the teacher model's "
                             "section: backend hf or openai)")
        if self.backend == "rule" and self.llm is not None:
            raise ValueError("critic.llm is set but critic.backend is 'rule'")
        return self


class TrainSection(StrictModel):
    """The SAD run of every round, from a `trainer fit` config (recipe sad)."""

    config: PathText = Field(description="trainer fit YAML (configs/train_tiny.yaml); run_dir and "
                        "shards are set per round, tokenizer is kept")
    set: list[str] = Field(default_factory=list, description="key=value overrides of it, as "
                           "`trainer fit --set`")
    round0_steps: Count | None = Field(None, ge=1, description="optimizer steps of round 0 "
                                     "(None = the config's run.max_steps)")
    steps_per_round: Count = Field(50, ge=1, description="optimizer steps of each later round, "
                                 "continuing from the previous round's checkpoint")
    replay_share: float = Field(0.5, ge=0, lt=1, description="share of a round's training rows "
                                "drawn from earlier rounds (round 0's teacher trajectories and "
                                "earlier repairs), so the student does not forget; the rest "
                                "are this round's repairs")


class DPOSection(StrictModel):
    """Optional DPO after each student round's SAD run, on that round's repair pairs
    (chosen = critique + fix, rejected = a blind retry of the student's wrong step)."""

    enabled: bool = Field(False, description="run DPO on the round's repair pairs")
    config: PathText | None = Field(None, description="trainer fit YAML with recipe dpo "
                               "(configs/dpo_tiny.yaml); init_from and shards are set per "
                               "round, the trajectory anchor off (dpo.anchor_weight=0)")
    set: list[str] = Field(default_factory=list, description="key=value overrides of it")
    steps: Count = Field(20, ge=1, description="DPO optimizer steps per round")

    @model_validator(mode="after")
    def _config(self) -> "DPOSection":
        if self.enabled and not self.config:
            raise ValueError("dpo.enabled needs dpo.config (a recipe dpo YAML)")
        return self


class EvalSection(StrictModel):
    """`trainer eval` of every round's student on the same held-out tasks."""

    envs: tuple[str, ...] = Field(("sql", "fs", "enterprise"), min_length=1,
                                  description="environments, round-robin over the tasks")
    num_tasks: Count = Field(30, ge=1, description="held-out tasks (episodes and gold steps)")
    eval_seed: Seed = Field(0, description="held-out family; the same every round")
    irr_tasks: Count = Field(6, ge=0, description="held-out tasks with an error injected into "
                           "the oracle's rollout, the student continuing from it: the round "
                           "table's IRR (recovery rate); each costs up to the turns a perfect "
                           "recovery needs + 2 (~20 s a task for a tiny CPU model); 0 = no IRR. "
                           "6 gives a coarse figure (steps of 1/6): raise it to compare rounds")
    max_steps: int = Field(8, ge=1, le=MAX_TURNS, description="assistant turns per episode")
    max_new_tokens: int = Field(192, ge=1, le=MAX_NEW_TOKENS, description="tokens per generated turn")
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="episodes in flight")
    threads: Count = Field(1, ge=0, description="torch CPU threads (0 = torch's default)")


StopMetric = Literal["success_rate", "next_call_exact_match", "act_token_accuracy",
                     "schema_valid_rate"]
STOP_METRICS = get_args(StopMetric)


class StopConfig(StrictModel):
    metric: StopMetric = Field("success_rate", description="held-out metric whose gain "
                               "decides whether to go on: " + ", ".join(STOP_METRICS))
    # every stop metric is a rate in [0, 1], so a gain lies in [-1, 1]: 5 meant as 5% would
    # stop after every round
    min_gain: float | None = Field(None, ge=-1, le=1, description="stop after a round that "
                                   "gains less than this over the round before, a difference "
                                   "of rates (0.01 = one point; None = run all rounds)")


class LoopConfig(StrictModel):
    out: PathText = Field(description="loop directory: round-NNN/ per round, rounds.jsonl, "
                     "rounds.md; rerunning into it continues from the first incomplete round")
    rounds: int = Field(2, ge=1, le=1000, description="rounds in all, round 0 included")
    seed: Seed = Field(0, description="seed of the replay draw")
    ray_address: str | None = Field(None, description="Ray to join; default $RAY_ADDRESS or local")
    round0: RoundZeroConfig
    student: StudentConfig = Field(default_factory=StudentConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    train: TrainSection
    dpo: DPOSection = Field(default_factory=DPOSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    stop: StopConfig = Field(default_factory=StopConfig)


# Fields that do not change what a round produces: a rerun may change them (more rounds, a
# stop threshold, another Ray) and still continue the same loop.
RUN_ONLY_FIELDS = {"out", "rounds", "ray_address", "stop"}


# The config files a loop names, fingerprinted by content rather than path: the same file
# uploaded with a `ray job submit` resolves into another directory (`_ray_pkg_<hash>`), and a
# file edited in place changes what the next rounds produce.
CONFIG_FILE_FIELDS = (("round0", "generate"), ("train", "config"), ("dpo", "config"))


def _file_digest(path: str | None) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else path
    except OSError:  # not there (yet): validated elsewhere; the path stands for it
        return path


def loop_fingerprint(config: LoopConfig) -> str:
    dump = config.model_dump(mode="json", exclude=RUN_ONLY_FIELDS)
    for section, field in CONFIG_FILE_FIELDS:
        dump[section][field] = _file_digest(dump[section][field])
    return hashlib.sha256(json.dumps(dump, sort_keys=True).encode()).hexdigest()[:16]


def load_loop_config(path: str | Path | None, overrides: list[str] | None = None) -> LoopConfig:
    """YAML file, then `key=value` overrides, then validation (ConfigError naming the field)."""
    return load_model(LoopConfig, path, overrides, kind="loop config")
