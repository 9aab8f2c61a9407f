"""The critics stage reuses the negatives stage's mutation reports at the injected step."""

from __future__ import annotations

import pytest

import critics.inject as inject
from critics.inject import inject_error
from datagen.config import CriticsConfig, NegativesConfig, load_config
from datagen.pipeline.stages.critics import CriticStage
from datagen.pipeline.stages.negatives import NegativeStage, StepReports
from datagen.teachers import EnvPool
from datagen.types import ToolCall
from mutators import ALL_KINDS, KINDS
from tests.datagen.helpers import oracle_trajectories


@pytest.fixture(scope="module")
def reported():
    trajectories = oracle_trajectories(24)
    reports = StepReports()
    NegativeStage(NegativesConfig(), run_seed=0, reports=reports).run(trajectories, EnvPool())
    return trajectories, reports


def _known(reports: StepReports, traj):
    return lambda index: reports.get(traj.id, index, traj.steps[index].call)


def test_an_injection_takes_the_reported_negative_and_still_proves_it(reported, monkeypatch):
    trajectories, reports = reported
    asked: list[tuple[str, ...]] = []
    real = inject.mutate_report

    def recording(*args, **kwargs):  # the real search, with the kinds it was asked for
        asked.append(tuple(kwargs["kinds"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(inject, "mutate_report", recording)
    pool, reused = EnvPool(), 0
    for seed, traj in enumerate(t for t in trajectories if t.success):
        injection = inject_error(traj, pool.get(traj.task.env), seed, ALL_KINDS,
                                 _known(reports, traj))
        assert not isinstance(injection, inject.Rejected), injection
        if injection.kind not in KINDS:
            continue
        reused += 1
        report = reports.get(traj.id, injection.step, traj.steps[injection.step].call)
        assert injection.negative is report.get(injection.kind)
        gold = traj.steps[injection.step].observation
        if injection.kind == "logical_error":  # executed again here: the outcome differs
            assert injection.observation.error is None
            assert injection.observation.content != gold.content
        else:  # fails validation for its kind's reason, and the environment refuses it
            reason = "unknown key" if injection.kind == "hallucinated_key" else "expected"
            assert any(reason in error for error in injection.negative.errors)
            assert injection.observation.error
    assert reused >= 5
    assert asked and all(set(kinds) == set(ALL_KINDS) - set(KINDS) for kinds in asked)


def test_merged_report_keeps_the_kinds_order_and_the_searched_kinds(reported):
    trajectories, reports = reported
    traj = next(t for t in trajectories if t.success)
    index = next(i for i, s in enumerate(traj.steps) if s.call is not None)
    env = EnvPool().get(traj.task.env)
    inject.replay(env, traj, index)
    fresh = inject.step_report(traj, index, env, 5, ALL_KINDS, None)
    inject.replay(env, traj, index)
    merged = inject.step_report(traj, index, env, 5, ALL_KINDS, _known(reports, traj)(index))
    kinds = [n.kind for n in merged.negatives] + list(merged.impossible)
    assert sorted(kinds) == sorted(ALL_KINDS)
    assert [n.kind for n in merged.negatives] == [k for k in ALL_KINDS
                                                  if k in {n.kind for n in merged.negatives}]
    for kind in set(ALL_KINDS) - set(KINDS):  # not reported: searched with the same seed
        assert merged.get(kind) == fresh.get(kind)


def test_reports_are_for_this_call_and_this_batch_only(reported):
    trajectories, reports = reported
    traj = next(t for t in trajectories if t.success)
    index = next(i for i, s in enumerate(traj.steps) if s.call is not None)
    call = traj.steps[index].call
    assert reports.get(traj.id, index, call) is not None
    assert reports.get(traj.id, index, ToolCall(call.name, {"other": 1})) is None
    assert reports.get("no-such-trajectory", index, call) is None
    stage = NegativeStage(NegativesConfig(), run_seed=0, reports=reports)
    stage.run([], EnvPool())  # a new batch: the last one's reports are gone
    assert len(reports) == 0
    # made without executing, a logical error proves less than the critics' own check
    assert NegativeStage(NegativesConfig(execute=False), 0, reports=StepReports()).reports is None


def test_the_critics_stage_of_a_worker_gets_the_negatives_stage_reports(tmp_path):
    from datagen.pipeline.chunk import Chunk, ChunkProcessor

    config = load_config("configs/demo.yaml", {"out": str(tmp_path), "num_trajectories": 20,
                                               "chunk_size": 20, "progress": False})
    processor = ChunkProcessor(config)
    stages = {stage.name: stage for stage in processor.stages}
    assert stages["negatives"].reports is stages["critics"].reports is not None
    processor.run_stages(processor.rollout(Chunk(0, 0, 20)))
    assert len(stages["critics"].reports) > 0


def test_stage_output_with_reports_is_deterministic(reported):
    trajectories, _ = reported
    config = CriticsConfig(inject_rate=1.0, safety_rate=0.0)
    runs = []
    for _ in range(2):
        reports = StepReports()
        NegativeStage(NegativesConfig(), 0, reports=reports).run(trajectories, EnvPool())
        runs.append(CriticStage(config, 0, reports=reports).run(trajectories, EnvPool()))
    assert runs[0].tables["repairs"].equals(runs[1].tables["repairs"])
    assert runs[0].stats["repaired"] == runs[1].stats["repaired"]
    assert sum(runs[0].stats["repaired"].values()) >= 15
