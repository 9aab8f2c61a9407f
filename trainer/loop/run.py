"""`python -m trainer loop`: rounds of generation, training and evaluation, resumable by round.

Topology of one round (each phase an existing entry point, run in this driver process against
one Ray):

    round 0:   datagen generate (teacher, round0.generate)  -> trainer fit (SAD)  -> eval
    round r:   datagen generate (teacher = policy on round r-1's checkpoint, round = r,
               fresh run seed; critic stage repairs the failed rollouts)
               -> mix (the round's repairs + replay share of earlier rounds)
               -> trainer fit (SAD from round r-1's checkpoint) [-> trainer fit (DPO on the
               round's repair pairs)] -> eval on the same held-out tasks
    after each round: round.json (written last: the round is complete), rounds.jsonl and
               rounds.md rebuilt; stop after `rounds` or when `stop.metric` gains less than
               `stop.min_gain`

Every phase writes a record when it ends (trainer.loop.rounds); a rerun skips complete rounds
and recorded phases, and generation and training resume inside themselves (complete chunks,
the latest checkpoint), so a killed loop loses at most the unfinished part of one phase.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trainer.config import ConfigError, TrainConfig
from trainer.loop import evaluation, generation, mix, train
from trainer.loop.config import LoopConfig, loop_fingerprint
from trainer.loop.rounds import RoundDir, claim, write_json
from trainer.loop.table import write_table
from trainer.tokens import tokenizer_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What every round needs, checked before any work starts."""

    config: LoopConfig
    out: Path
    base: Any                    # round 0's datagen GenerateConfig (OUT/round-000/data)
    round0_data: Path            # the teacher data (generated or round0.data)
    round0_tables: tuple[str, ...]
    tokenizer: str
    round0_consistency: str = "auto"  # round 0's data.consistency: its replayed rows


@dataclass
class LoopResult:
    out: str
    rows: list[dict[str, Any]]   # the round table
    stopped: str                 # why the loop ended


def _absolute(path: str | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else path


def resolve(config: LoopConfig) -> LoopConfig:
    """Paths made absolute (Ray workers do not share the driver's working directory)."""
    r0 = config.round0.model_copy(update={
        "generate": _absolute(config.round0.generate), "data": _absolute(config.round0.data),
        "checkpoint": _absolute(config.round0.checkpoint)})
    return config.model_copy(update={
        "out": _absolute(config.out), "round0": r0,
        "train": config.train.model_copy(update={"config": _absolute(config.train.config)}),
        "dpo": config.dpo.model_copy(update={"config": _absolute(config.dpo.config)})})


def make_plan(config: LoopConfig) -> Plan:
    """Every derived config validated (ConfigError naming the field) before any work."""
    config = resolve(config)
    out = Path(config.out)
    first = RoundDir(out, 0)
    data = Path(config.round0.data) if config.round0.data else first.data
    if config.round0.data:  # read only; also when round0.generate gives the base config
        generation.round0_manifest(config)
    round0 = _checked(lambda: train.round0_train_config(config, data, first.train), "train")
    if round0.recipe != "sad":
        raise ConfigError(f"train.config: recipe must be 'sad', not {round0.recipe!r}")
    tokenizer = _absolute(round0.tokenizer)
    if problem := tokenizer_problem(tokenizer):
        raise ConfigError(f"train.config: {problem}")
    _checked(lambda: train.student_train_config(config, out, out, "probe"), "train")
    if config.dpo.enabled:
        dpo = _checked(lambda: train.dpo_train_config(config, out, out, "probe"), "dpo")
        if dpo.recipe != "dpo":
            raise ConfigError(f"dpo.config: recipe must be 'dpo', not {dpo.recipe!r}")
    if config.round0.checkpoint:
        from trainer.checkpoint_check import CheckpointError
        from trainer.eval import resolve_checkpoint

        try:
            resolve_checkpoint(config.round0.checkpoint)
        except (FileNotFoundError, CheckpointError) as exc:
            raise ConfigError(f"round0.checkpoint: {exc}") from None
    _checked(lambda: evaluation.eval_config(config.eval, "probe", []), "eval")
    base = _checked(lambda: generation.base_generate_config(config, first.data), "round0")
    _check_eval_envs(config.eval.envs)  # after the base config imported its env_modules
    for index in sorted({1, config.rounds - 1} - {0}):  # seeds grow with the round
        _checked(lambda: generation.student_generate_config(
            config, base, index, "probe", tokenizer, out),
            "student/critic" + (f" (round {index})" if index > 1 else ""))
    return Plan(config, out, base, data, round0.data.tables, tokenizer,
                round0.data.consistency)


def _check_eval_envs(envs: tuple[str, ...]) -> None:
    from datagen.envs import resolve_env

    for name in envs:
        try:
            resolve_env(name)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"eval.envs: {exc.args[0] if exc.args else exc}") from None


def _checked(build: Callable[[], Any], section: str) -> Any:
    from pydantic import ValidationError

    try:
        return build()
    except ConfigError as exc:
        raise ConfigError(f"{section}: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{section}: {problems}") from None


def run_loop(config: LoopConfig) -> LoopResult:
    """Run (or continue) the loop described by `config`; blocks until it stops."""
    from datagen.pipeline.runlock import FileRunLock, LockOwner

    plan = make_plan(config)
    plan.out.mkdir(parents=True, exist_ok=True)
    fingerprint = loop_fingerprint(plan.config)
    # one loop at a time in OUT (a second one is refused naming the first; the kernel frees
    # the lock when the holder dies, so a killed loop's rerun continues)
    with FileRunLock(plan.out, LockOwner.current(fingerprint), kind="trainer loop"):
        claim(plan.out, fingerprint, plan.config.model_dump(mode="json"))
        return _run_rounds(plan)


def _run_rounds(plan: Plan) -> LoopResult:
    from trainer.fit import init_ray

    init_ray(plan.config.ray_address)
    manifests: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    stopped = f"ran {plan.config.rounds} rounds"
    for index in range(plan.config.rounds):
        directory = RoundDir(plan.out, index)
        manifest = directory.complete()
        if manifest is None:
            manifest = run_round(plan, directory, manifests)
        else:
            log.info("round %d is complete (%s): skipped", index, directory.manifest)
        manifests.append(manifest)
        rows = write_table(plan.out, manifests)
        if reason := stop_reason(plan.config, manifests):
            stopped = reason
            break
    return LoopResult(str(plan.out), rows, stopped)


def stop_reason(config: LoopConfig, manifests: list[dict[str, Any]]) -> str | None:
    """Why to stop after the last round (a gain under the threshold), or None."""
    if config.stop.min_gain is None or len(manifests) < 2:
        return None
    metric = config.stop.metric
    now, before = (m["eval"].get(metric) or 0.0 for m in manifests[-1:-3:-1])
    if now - before < config.stop.min_gain:
        return (f"round {manifests[-1]['round']} gained {now - before:+.4f} {metric} "
                f"(< {config.stop.min_gain})")
    return None


class PhaseFailed(RuntimeError):
    """A phase of a round raised; rerunning the loop continues from that phase (unless its fit
    met bad data or diverged: a rerun would fail the same way, and a changed config is
    refused in the same out, trainer.loop.rounds.claim)."""

    def __init__(self, index: int, phase: str, cause: BaseException) -> None:
        from ray.train import TrainingFailedError

        from trainer.fit import failure_cause, lasting_failure

        advice = "rerun the same command to continue from here"
        if isinstance(cause, TrainingFailedError):  # Ray's own text ends in retry advice
            detail = failure_cause(cause)
            if kind := lasting_failure(cause):
                detail = f"{kind}: {detail}"
                advice = "a rerun fails the same way: change the config, into another out"
        else:
            detail = f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[-1][:300]}"
        super().__init__(f"round {index}, phase {phase}: {detail} ({advice})")


class _Phases:
    """A round's phases: each runs once, its record kept on disk (see trainer.loop.rounds)."""

    def __init__(self, directory: RoundDir) -> None:
        self.directory = directory
        self.records: dict[str, Any] = {}

    def run(self, name: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        record = self.directory.done(name)
        if record is None:
            log.info("round %d: %s", self.directory.index, name)
            try:
                record = work()
            except (ConfigError, KeyboardInterrupt):
                raise
            except Exception as exc:  # a lost worker, OOM, a failed chunk: say where, go on later
                raise PhaseFailed(self.directory.index, name, exc) from exc
            write_json(self.directory.record(name), record)
        self.records[name] = record
        return record

    def manifest(self, checkpoint: str, eval_report: dict[str, Any],
                 note: str | None = None) -> dict[str, Any]:
        seconds = {name: round(_wall_seconds(record), 3) for name, record in self.records.items()}
        manifest = {"round": self.directory.index, "checkpoint": checkpoint,
                    "eval": evaluation.headline(eval_report), "note": note,
                    "seconds": round(sum(seconds.values()), 3), "phase_seconds": seconds,
                    **{name: _summary(record) for name, record in self.records.items()
                       if name != "eval"},
                    "eval_report": str(self.directory.record("eval"))}
        write_json(self.directory.manifest, manifest)  # last: the round is complete
        return manifest


def _wall_seconds(record: dict[str, Any]) -> float:
    """A phase's wall time: an eval report's `wall_seconds` (its `seconds` is a dict per
    section, which a round() of it turned into the TypeError that ended every round 0 on
    2026-12-03); the generate, mix and train records' `seconds`; 0 for a reused phase."""
    if record.get("wall_seconds") is not None:
        return float(record["wall_seconds"])
    seconds = record.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) else 0.0


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "data"}  # the data stream's description


def run_round(plan: Plan, directory: RoundDir, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    if directory.index == 0:
        return _round_zero(plan, directory)
    return _student_round(plan, directory, earlier)


def _round_zero(plan: Plan, directory: RoundDir) -> dict[str, Any]:
    config, phases = plan.config, _Phases(directory)
    if config.round0.data:
        phases.run("generate", lambda: {"out": config.round0.data, "reused": True,
                                        **generation.rollout_counts(plan.round0_data)})
    else:
        phases.run("generate", lambda: generation.run_generate(plan.base, config.ray_address))
    if config.round0.checkpoint:
        from trainer.eval import resolve_checkpoint

        checkpoint = phases.run("train", lambda: {
            "checkpoint": resolve_checkpoint(config.round0.checkpoint), "reused": True,
            "steps": None})["checkpoint"]
    else:
        cfg = train.round0_train_config(config, plan.round0_data, directory.train)
        checkpoint = phases.run("train", lambda: train.run_fit(cfg))["checkpoint"]
    report = phases.run("eval", lambda: evaluation.run_eval(
        config.eval, checkpoint, [str(plan.round0_data)]))
    return phases.manifest(checkpoint, report)


def _student_round(plan: Plan, directory: RoundDir,
                   earlier: list[dict[str, Any]]) -> dict[str, Any]:
    config, phases, index = plan.config, _Phases(directory), directory.index
    previous = earlier[-1]["checkpoint"]
    generate = generation.student_generate_config(config, plan.base, index, previous,
                                                  plan.tokenizer, directory.data)
    produced = phases.run("generate", lambda: generation.run_generate(generate,
                                                                      config.ray_address))
    earlier_data = [RoundDir(plan.out, r).data for r in range(1, index)]
    if not produced["repairs"]:
        prior = RoundDir(plan.out, index - 1).done("eval")
        report = phases.run("eval", lambda: {**prior, "reused_from_round": index - 1,
                                             "wall_seconds": 0.0})
        return phases.manifest(previous, report, note="no repairs (the student failed no "
                               "repairable task): not trained, round r-1's checkpoint kept")
    phases.run("mix", lambda: _mix(plan, directory, earlier_data))
    cfg: TrainConfig = train.student_train_config(config, directory.mix, directory.train, previous)
    checkpoint = phases.run("train", lambda: train.run_fit(cfg))["checkpoint"]
    if config.dpo.enabled:
        dpo = train.dpo_train_config(config, directory.data, directory.dpo, checkpoint)
        checkpoint = phases.run("dpo", lambda: train.run_fit(dpo))["checkpoint"]
    # the mixes too: the student trained on them, and its training.json names them
    mixes = [RoundDir(plan.out, r).mix for r in range(1, index + 1)]
    roots = [str(plan.round0_data), *map(str, earlier_data),
             *(str(m) for m in mixes if m.is_dir()), str(directory.data)]
    report = phases.run("eval", lambda: evaluation.run_eval(config.eval, checkpoint, roots))
    return phases.manifest(checkpoint, report)


def _mix(plan: Plan, directory: RoundDir, earlier_data: list[Path]) -> dict[str, Any]:
    started = time.perf_counter()
    new = mix.table_rows(directory.data, "repairs")
    pool = mix.replay_pool(plan.round0_data, plan.round0_tables, earlier_data,
                           plan.round0_consistency)
    counts = mix.build_mix(directory.mix, new, pool, plan.config.train.replay_share,
                           seed=plan.config.seed * 1_000_003 + directory.index)
    return {**counts, "out": str(directory.mix), "seconds": time.perf_counter() - started}
