"""Consistency filter (issue 18): votes on hand-built rollouts, outcome keys in a real
environment, the falsification verdicts, config validation, and the stage over a chunk."""

from __future__ import annotations

import dataclasses

import pytest

from critics.falsify import LLMFalsifier, parse_falsify_reply, rule_falsify
from datagen.config import ConfigError, load_config
from datagen.envs import make_env
from datagen.pipeline.chunk import ChunkProcessor, plan_chunks
from datagen.pipeline.consistency import normalise_answer, outcome_key, rollout_samples, vote
from tests.datagen.consistency_fakes import WrongOnSampleOneOracleFake, with_answer
from datagen.teachers import EnvPool
from datagen.teachers.oracle import OracleTeacher
from datagen.types import Observation, Step, ToolCall, Trajectory, trajectory_id


def _votes(outcomes):
    return [(v.votes, round(v.agreement, 3), v.in_majority) for v in vote(outcomes)]


def test_votes_agreement_and_majority_on_hand_built_outcomes():
    assert _votes(["a", "a", "b"]) == [(2, 0.667, True), (2, 0.667, True), (1, 0.333, False)]
    assert _votes(["a"]) == [(1, 1.0, True)]  # K=1: its own majority
    assert _votes(["a", "b"]) == [(1, 0.5, False), (1, 0.5, False)]  # a tie keeps none
    assert _votes(["a", "b", "c"]) == [(1, 0.333, False)] * 3  # all disagree
    assert _votes(["a", "a", "b", "b", "c"]) == [(2, 0.4, False)] * 4 + [(1, 0.2, False)]
    # no outcome (no final answer): no vote, but counts in the denominator
    assert _votes(["a", None, None]) == [(1, 0.333, True), (0, 0.0, False), (0, 0.0, False)]
    assert _votes([None, None]) == [(0, 0.0, False)] * 2
    assert vote([]) == []


def _oracle_rollout(env_name: str, seed: int = 3) -> tuple[Trajectory, object]:
    env = make_env(env_name)
    task = env.generate_task(seed, f"{env_name}-t{seed}")
    return OracleTeacher().rollout(task, env), env


def _question(env_name: str) -> tuple[Trajectory, object]:
    for seed in range(40):
        traj, env = _oracle_rollout(env_name, seed)
        if traj.task.answer and traj.success and outcome_key(env, traj).startswith("answer:"):
            return traj, env
    raise AssertionError("no question task in 40 seeds")


def test_outcome_key_of_a_question_is_the_normalised_answer_and_state():
    traj, env = _question("sql")
    key = outcome_key(env, traj)
    assert key == outcome_key(env, with_answer(traj, f'  "{traj.steps[-1].answer.upper()}." '))
    assert key != outcome_key(env, with_answer(traj, traj.steps[-1].answer + " and 1"))
    assert normalise_answer("The  Total is\n42!") == "the total is 42"
    no_answer = dataclasses.replace(traj, steps=traj.steps[:-1])
    assert outcome_key(env, no_answer) is None


def test_outcome_key_of_a_changed_world_is_its_end_state_whatever_the_remark():
    for seed in range(40):
        traj, env = _oracle_rollout("fs", seed)
        key = outcome_key(env, traj)
        if key.startswith("state:"):
            break
    else:
        raise AssertionError("no state task in 40 seeds")
    assert outcome_key(env, with_answer(traj, "Done.")) == key  # the remark does not vote
    without = [dataclasses.replace(traj, steps=traj.steps[:i] + traj.steps[i + 1:])
               for i in range(len(traj.steps) - 1)]
    assert any(outcome_key(env, fewer) != key for fewer in without)  # a write left out


def test_rule_falsify_finds_a_concrete_reason_in_a_hand_built_wrong_step():
    traj, env = _question("sql")
    assert rule_falsify(traj).falsified is False
    first = traj.steps[0]
    failing = dataclasses.replace(first, observation=Observation("Error: no such table",
                                                                 error="no such table: x"))
    verdict = rule_falsify(dataclasses.replace(traj, steps=[failing, *traj.steps[1:]]))
    assert (verdict.falsified, verdict.step, verdict.kind) == (True, 0, "tool_error")
    assert "no such table" in verdict.reason
    bad_call = dataclasses.replace(first, call=ToolCall(first.call.name, {"bogus_key": 1}))
    verdict = rule_falsify(dataclasses.replace(traj, steps=[bad_call, *traj.steps[1:]]))
    assert (verdict.falsified, verdict.kind) == (True, "schema_invalid")
    made_up = with_answer(traj, "It is 918273645.")
    verdict = rule_falsify(made_up)
    assert (verdict.kind, verdict.step) == ("ungrounded_answer", len(traj.steps) - 1)
    assert rule_falsify(made_up, answer_matters=False).falsified is False
    turn = Step(reasoning="", raw="<tool_call>{oops", error="invalid_json: x",
                error_kind="invalid_json")
    verdict = rule_falsify(dataclasses.replace(traj, steps=[turn, *traj.steps]))
    assert (verdict.step, verdict.kind) == (0, "invalid_json")
    assert rule_falsify(dataclasses.replace(traj, steps=traj.steps[:-1])).kind == "no_answer"


def test_llm_falsifier_reads_verdicts_and_never_raises():
    traj, _ = _question("sql")
    n = len(traj.steps)
    assert parse_falsify_reply("<step>1</step><reason>wrong id</reason>", n).falsified is True
    assert parse_falsify_reply("<verdict>none</verdict>", n).falsified is False
    unreadable = parse_falsify_reply("looks fine to me", n)
    assert (unreadable.falsified, unreadable.kind) == (None, "unreadable_reply")
    assert parse_falsify_reply("<step>99</step><reason>x</reason>", n).falsified is None
    assert parse_falsify_reply(RuntimeError("down"), n).kind == "critic_failed"

    prompts_seen = []

    def step_zero_critic_fake(prompts):  # FAKE model: blames step 0 of every trajectory
        prompts_seen.extend(prompts)
        return ["<step>0</step><reason>the filter is wrong</reason>" for _ in prompts]

    verdicts = LLMFalsifier(step_zero_critic_fake).verdicts([traj, traj])
    assert [v.step for v in verdicts] == [0, 0] and len(prompts_seen) == 1  # deduplicated
    assert traj.task.instruction in prompts_seen[0]
    assert traj.task.answer not in prompts_seen[0].split("# Steps")[0]  # no gold shown

    def broken(prompts):
        raise ConnectionError("endpoint down")

    assert LLMFalsifier(broken).verdicts([traj])[0].kind == "critic_failed"
    # a batch of distinct prompts all failing is the backend, not the trajectories: the chunk
    # fails (before, every check of every chunk was "critic_failed" and the run complete)
    from datagen.teachers.base import MIN_CALLS_JUDGED, BackendAnsweredNone

    from tests.datagen.helpers import oracle_trajectories

    many = oracle_trajectories(MIN_CALLS_JUDGED)
    with pytest.raises(BackendAnsweredNone, match=rf"^the critic's backend failed all "
                       rf"{MIN_CALLS_JUDGED} falsification checks of the chunk: ConnectionError"):
        LLMFalsifier(broken).verdicts(many)


@pytest.mark.parametrize("overrides, field", [
    ({"consistency.k": 0}, "consistency.k"),
    ({"consistency.k": 65}, "consistency.k"),
    ({"consistency.falsify": "maybe"}, "consistency.falsify"),
    ({"consistency.min_agreement": 1.5}, "consistency.min_agreement"),
    ({"consistency.min_confidence": 0.5}, "consistency"),
    ({"consistency.enabled": True, "consistency.scorer": "nope"}, "consistency.scorer"),
    ({"consistency.enabled": True, "critics.enabled": False, "critics.backend": "llm"},
     "consistency.falsify"),
    ({"consistency.kk": 3}, "consistency.kk"),
    ({"consistency.enabled": True, "teacher.backend": "hf", "teacher.hf.model": "m",
      "teacher.sampling.temperature": 0}, "teacher.sampling.temperature 0"),
    ({"consistency.enabled": True, "teacher.backend": "openai", "teacher.sampling.seed": 3,
      "teacher.openai.base_url": "http://127.0.0.1:9/v1", "teacher.openai.model": "m"},
     "teacher.sampling.seed 3"),
])
def test_invalid_consistency_config_fails_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(None, overrides)


def test_samples_that_cannot_differ_are_refused_only_where_they_would_not():
    greedy = {"consistency.enabled": True, "teacher.sampling.temperature": 0}
    assert load_config(None, greedy).consistency.k == 4  # the oracle varies samples by id
    assert load_config(None, {**greedy, "teacher.backend": "hf", "teacher.hf.model": "m",
                              "consistency.k": 1}).consistency.k == 1
    seeded_hf = {"consistency.enabled": True, "teacher.backend": "hf", "teacher.hf.model": "m",
                 "teacher.sampling.seed": 3}  # one seeded stream: the samples still differ
    assert load_config(None, seeded_hf).teacher.sampling.seed == 3


def test_default_config_keeps_its_fingerprint_and_k_samples_have_distinct_ids():
    from datagen.config import fingerprint, public_dump

    assert "consistency" not in public_dump(load_config(None))
    assert "consistency" in public_dump(load_config(None, {"consistency.enabled": True}))
    env = make_env("sql")
    tasks = [env.generate_task(s, f"sql-{s}") for s in range(3)]
    groups = rollout_samples(OracleTeacher(), tasks, EnvPool(), 0, 3)
    assert [len(g) for g in groups] == [3, 3, 3]
    assert all(t.task is task for g, task in zip(groups, tasks) for t in g)
    ids = [t.id for g in groups for t in g]
    assert len(set(ids)) == 9
    assert groups[0][0].id == trajectory_id("sql-0", "oracle", 0)  # sample 0: the usual id
    assert groups[0][2].id == trajectory_id("sql-0", "oracle", 0, 2)
    assert fingerprint(load_config(None)) == fingerprint(load_config(None, {"consistency.k": 4}))


def _processor(tmp_path, **overrides):
    config = load_config(None, {"num_trajectories": 12, "chunk_size": 12, "out": str(tmp_path),
                                "negatives.enabled": False, "critics.enabled": False,
                                "consistency.enabled": True, "consistency.k": 3,
                                "env_modules": ["tests.datagen.consistency_fakes"], **overrides})
    processor = ChunkProcessor(config)
    processor.teacher = WrongOnSampleOneOracleFake()
    return processor, plan_chunks(config)[0]


def test_stage_keeps_the_majority_and_drops_the_odd_rollout(tmp_path):
    processor, chunk = _processor(tmp_path)
    trajectories = processor.rollout(chunk)
    tables, stats = processor.run_stages(trajectories)
    rows = tables["consistency"].to_pylist()
    assert len(rows) == len(trajectories) == 36
    assert [r["trajectory_id"] for r in rows] == [t.id for t in trajectories]
    assert [r["sample"] for r in rows] == [0, 1, 2] * 12 and {r["k"] for r in rows} == {3}
    by_sample = {j: [r for r in rows if r["sample"] == j] for j in range(3)}
    assert all(r["kept"] and r["in_majority"] for r in by_sample[0])
    success = {t.id: t.success for t in trajectories}
    # sample 1's made-up answer: a remark where it changed the world (state tasks: kept, and
    # the checker agrees), outvoted where the answer is the outcome
    assert all(success[r["trajectory_id"]] for r in by_sample[1] if r["kept"])
    for row, traj in zip(rows, trajectories):
        if row["sample"] == 2 and traj.task.seed % 2 == 0:  # no answer: no vote, falsified
            assert row["outcome"] is None and row["falsify_kind"] == "no_answer"
            assert row["votes"] == 0 and not row["kept"]
    # where sample 1's answer moved nothing, it is outvoted (and its figure is ungrounded)
    outvoted = [r for r in by_sample[1] if r["outcome"] and r["outcome"].startswith("answer:")]
    assert outvoted and all(not r["in_majority"] for r in outvoted)
    assert stats["consistency"]["rows"]["rollouts"] == 36
    assert stats["consistency"]["rows"]["kept"] == sum(r["kept"] for r in rows)
    kept = [success[r["trajectory_id"]] for r in rows if r["kept"]]
    assert sum(kept) / len(kept) == 1.0 > sum(success.values()) / len(success)


def test_scorer_from_the_registry_sets_confidence_and_its_threshold(tmp_path):
    processor, chunk = _processor(tmp_path, **{"consistency.scorer": "confidence_fake",
                                               "consistency.scorer_options": {"high": 0.9},
                                               "consistency.min_confidence": 0.5,
                                               "consistency.k": 2})
    tables, _ = processor.run_stages(processor.rollout(chunk))
    rows = tables["consistency"].to_pylist()
    assert {(r["sample"], round(r["confidence"], 2)) for r in rows} == {(0, 0.9), (1, 0.1)}
    # k=2 with sample 1 wrong: a tie wherever the answer decides, so nothing is kept there;
    # where it does not (state tasks), sample 0 passes and sample 1 fails the threshold
    assert not any(r["kept"] for r in rows if r["sample"] == 1)
    assert any(r["kept"] for r in rows if r["sample"] == 0)


def test_inspect_shows_success_of_kept_against_all_rollouts(tmp_path):
    import polars as pl
    import pyarrow.parquet as pq

    from datagen.pipeline.inspect import DatasetView
    from datagen.pipeline.stages.consistency import ConsistencyStage, filter_figures

    processor, chunk = _processor(tmp_path)
    trajectories = processor.rollout(chunk)
    tables, _ = processor.run_stages(trajectories)
    success = {t.id: t.success for t in trajectories}
    consistency = tables["consistency"].to_pylist()
    figures = filter_figures(pl.from_arrow(tables["consistency"]),
                             pl.from_arrow(tables["trajectories"]))
    assert figures["env"].to_list() == sorted({r["env"] for r in consistency})
    for row in figures.iter_rows(named=True):
        mine = [r for r in consistency if r["env"] == row["env"]]
        kept = [success[r["trajectory_id"]] for r in mine if r["kept"]]
        first = [success[r["trajectory_id"]] for r in mine if r["sample"] == 0]
        assert row["rollouts"] == len(mine) and row["tasks"] == len(first)
        assert row["kept_share"] == round(len(kept) / len(mine), 3)
        assert row["success_kept"] == round(sum(kept) / len(kept), 3) == 1.0
        assert row["success_sample0"] == round(sum(first) / len(first), 3)
        assert row["success_all"] == round(sum(success[r["trajectory_id"]] for r in mine)
                                           / len(mine), 3)
    assert figures["success_all"].min() < 1.0  # the wrong samples are there to be dropped
    shards = {}
    for name in ("trajectories", "consistency"):
        pq.write_table(tables[name], tmp_path / f"{name}.parquet")
        shards[name] = [tmp_path / f"{name}.parquet"]
    lines = ConsistencyStage.inspect_lines(DatasetView(tmp_path, {}, shards, samples=0))
    assert "consistency filter per environment:" in lines and "success_kept" in "\n".join(lines)
    assert "ungrounded_answer" in "\n".join(lines[lines.index("falsified by kind:"):])
    assert ConsistencyStage.inspect_lines(DatasetView(tmp_path, {}, {})) == []


@pytest.mark.slow
def test_pipeline_run_writes_the_consistency_table(ray_head, tmp_path):
    import polars as pl

    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation
    from datagen.pipeline.inspect import inspect_dataset
    from datagen.pipeline.verify import verify_output
    from datagen.readers import kept_trajectory_ids, load_sft

    out = tmp_path / "out"
    config = GenerateConfig(out=str(out), num_trajectories=10, chunk_size=5, progress=False,
                            num_workers=1, env_modules=["tests.datagen.consistency_fakes"],
                            teacher={"backend": "wrong_sample_fake"},
                            consistency={"enabled": True, "k": 3},
                            critics={"inject_rate": 0.0, "safety_rate": 0.0})
    summary = run_generation(config)
    assert summary.complete and summary.counts["trajectories"] == 30
    assert summary.counts["consistency"] == 30
    trajectories = pl.read_parquet(out / "trajectories" / "*.parquet")
    consistency = pl.read_parquet(out / "consistency" / "*.parquet")
    joined = trajectories.join(consistency, left_on="id", right_on="trajectory_id")
    assert joined.height == 30 and joined["task_id"].n_unique() == 10
    assert joined.group_by("task_id").len()["len"].to_list() == [3] * 10
    kept = joined.filter(pl.col("kept"))
    assert 10 <= kept.height < 30 and kept["success"].all()
    assert not joined["success"].all()
    assert verify_output(out).ok
    assert f"consistency: kept {kept.height} of 30 rollouts" in (out / "README.md").read_text()
    assert sorted(kept_trajectory_ids(out)) == sorted(kept["id"])
    sft = load_sft(out, successful_only=False, kept_only=True, cache_dir=str(tmp_path / "c"))
    assert sorted(sft["id"]) == sorted(kept["id"])
    report = inspect_dataset(out, samples=0).splitlines()
    table = report[report.index("consistency filter per environment:"):]
    env_rows = [line for line in table if line.startswith("│ ") and "┆" in line
                and line.split("┆")[0].strip("│ ") in set(joined["env"])]
    assert len(env_rows) == joined["env"].n_unique()
    assert all(line.split("┆")[-1].strip("│ ") == "1.0" for line in env_rows)  # success_kept
    assert "no_answer" in "\n".join(report[report.index("falsified by kind:"):])
