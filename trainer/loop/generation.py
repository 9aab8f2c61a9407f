"""The generation runs of the loop: round 0's teacher data, and round r's student rollouts.

A student round is an ordinary `datagen generate` run whose teacher backend is `policy` (the
round r-1 checkpoint, registered by trainer.agent_backend, which every chunk worker imports
through `env_modules`), marked `round = r`, on a run seed no earlier round used. Its critic
stage repairs the failed rollouts (`critics.repair_failed`): each repair starts from the
student's first wrong step, kept as an ERROR span, and names the student's row in `source_id`.
Injected errors, safety pairs and negatives are teacher-data business and are off.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from trainer.config import ConfigError
from trainer.loop.config import LoopConfig

if TYPE_CHECKING:
    from datagen.config import GenerateConfig

POLICY_MODULE = "trainer.agent_backend"  # registers the `policy` teacher backend on import


def base_generate_config(config: LoopConfig, out: Path) -> "GenerateConfig":
    """Round 0's datagen config with `out` set: from round0.generate (+ generate_set), else
    from the manifest of round0.data."""
    from datagen.config import GenerateConfig, load_config

    if config.round0.generate is not None:
        overrides = {**config.round0.generate_set, "out": str(out), "progress": False}
        try:
            return load_config(config.round0.generate, overrides)
        except ConfigError as exc:  # datagen's and the trainer's ConfigError are one class
            raise ConfigError(f"round0.generate: {exc}") from None
    from pydantic import ValidationError

    dump = round0_manifest(config).get("config")
    if not isinstance(dump, dict):
        raise ConfigError(f"round0.data: the manifest of {config.round0.data} records no "
                          "datagen config")
    try:
        return GenerateConfig.model_validate({**dump, "out": str(out), "progress": False})
    except ValidationError as exc:
        raise ConfigError(f"round0.data: the config its manifest records does not load here "
                          f"({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})") from None


def round0_manifest(config: LoopConfig) -> dict[str, Any]:
    """The manifest of round0.data, which must be a datagen OUT with trajectories (ConfigError
    naming the field otherwise)."""
    from datagen.pipeline.shards import OutputUnreadable, read_manifest

    try:
        manifest = read_manifest(Path(config.round0.data))
    except OutputUnreadable as exc:
        raise ConfigError(f"round0.data: {exc}") from None
    if not manifest["counts"].get("trajectories"):
        raise ConfigError(f"round0.data: {config.round0.data} holds no trajectories")
    return manifest


def student_generate_config(config: LoopConfig, base: "GenerateConfig", index: int,
                            checkpoint: str, tokenizer: str, out: Path) -> "GenerateConfig":
    """Round `index`'s rollout run: `base` with the student as teacher (see module doc)."""
    import trainer.agent_backend  # noqa: F401 - `policy` must be registered to validate
    from datagen.config import GenerateConfig

    student = config.student
    data = base.model_dump(mode="json")
    data.update(
        out=str(out), round=index, seed=base.seed + index * student.seed_stride,
        num_trajectories=student.num_tasks, chunk_size=student.chunk_size,
        num_workers=student.num_workers, tokenizer=None, overwrite=False, progress=False,
        env_modules=list(dict.fromkeys([*base.env_modules, POLICY_MODULE])),
        teacher={"backend": "policy", "name": f"student-r{index - 1}",
                 "hf": {"model": checkpoint, "tokenizer": tokenizer,
                        "max_batch_size": student.max_batch_size},
                 "sampling": {"temperature": student.temperature, "logprobs": 0,
                              "max_tokens_per_turn": student.max_tokens_per_turn,
                              "seed": base.seed + index},
                 "episode": {"max_turns": student.max_turns,
                             "on_invalid_turn": student.on_invalid_turn}},
        negatives={**data["negatives"], "enabled": False},
        critics={**data["critics"], "enabled": True, "backend": config.critic.backend,
                 "llm": config.critic.llm, "inject_rate": 0.0, "repair_failed": True,
                 "safety_rate": 0.0})
    if student.envs:
        data["envs"] = [{"name": name} for name in student.envs]
    data.pop("preferences", None)
    return GenerateConfig.model_validate(data)


def run_generate(generate: "GenerateConfig", address: str | None) -> dict[str, Any]:
    """Run (or resume) one generation; its record. A run with failed chunks raises: the
    round cannot be complete on part of its data."""
    from datagen.pipeline import run_generation

    started = time.perf_counter()
    summary = run_generation(generate, address)
    if not summary.complete:
        raise RuntimeError(f"generation into {generate.out} is incomplete "
                           f"({len(summary.failed_chunks)} failed chunks: "
                           f"{summary.failed_chunks[:2]}); rerun the loop to retry them")
    return {"out": generate.out, "counts": summary.counts, "seconds": time.perf_counter() - started,
            "round": generate.round, "seed": generate.seed, "teacher": generate.teacher.backend,
            **rollout_counts(Path(generate.out))}


def rollout_counts(out: Path) -> dict[str, Any]:
    """Rollouts, successes and repairs of a datagen OUT, read from its shards."""
    files = sorted((out / "trajectories").glob("part-*.parquet"))
    success = [bool(v) for f in files for v in pq.read_table(f, columns=["success"])
               .column("success").to_pylist()]
    repairs = sum(pq.read_metadata(f).num_rows for f in (out / "repairs").glob("part-*.parquet"))
    return {"rollouts": len(success), "succeeded": sum(success),
            "failed": len(success) - sum(success), "repairs": repairs}
