"""`python -m trainer eval` end to end on a tiny checkpoint and a real pipeline OUT."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.trainer.helpers import tiny_model
from trainer.__main__ import main
from trainer.heldout import heldout_tasks
from trainer.tokens import TextTokenizer, special_ids


@pytest.fixture(scope="module")
def checkpoint(trainer_tokenizer, tmp_path_factory):
    """A random tiny checkpoint with split embeddings, landmarks and an MCH."""
    directory = tmp_path_factory.mktemp("eval_checkpoint")
    tokenizer = TextTokenizer(trainer_tokenizer)
    ids = special_ids(tokenizer)
    tiny_model(vocab_size=1024, split_embeddings=True, use_landmark=True, landmark_block_size=64,
               use_mch=True, tool_call_start_id=ids["tool_call_start"],
               im_end_id=ids["im_end"]).save_pretrained(directory)
    tokenizer.save(directory)
    return directory


FAST = ["--envs", "sql,fs", "--num-tasks", "2", "--max-new-tokens", "6", "--max-steps", "2",
        "--candidates", "2", "--threads", "1", "--pref-tasks", "1", "--safety-worlds", "1"]


def test_one_report_with_step_level_episode_and_irr_metrics(checkpoint, pipeline_out, tmp_path,
                                                             capsys):
    out = tmp_path / "report.json"
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--irr-tasks", "1",
                 "--shards", str(pipeline_out), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    tasks = report["tasks"]
    assert tasks["count"] == 2 and tasks["per_env"] == {"sql": 1, "fs": 1}
    assert tasks["first_id"] == "heldout-0-sql-000000" and tasks["eval_seed"] == 0
    assert tasks["leak_check"]["shards"] == [str(pipeline_out)]
    assert tasks["leak_check"]["training_rows"] >= 96
    steps = report["step_level"]
    assert steps["trajectories"] == 2 and steps["call_steps"] > 2 and steps["act_tokens"] > 0
    assert steps["next_call_exact_match"] == 0.0  # 6 random tokens are never the gold call
    assert steps["copyable_arguments"] > 0 and steps["copy_rate"] == 0.0  # nor a parsed call
    assert steps["copy_misses"]["unparsed"] == 1.0
    assert steps["reason_ce"] > 5 and set(steps["per_env"]) == {"sql", "fs"}
    assert steps["mch"]["negatives"] > 0 and 0 <= steps["mch"]["auroc"] <= 1
    episodes = report["episodes"]
    assert episodes["episodes"] == 2 and episodes["success_rate"] == 0.0
    assert episodes["hybrid"]["by_trigger"]["truncated"]["switches"] == 2  # 6 tokens: cut off
    assert report["irr"]["overall"]["n"] + report["irr"]["skipped"] == 1
    assert report["irr"]["hybrid"]["turns"] == report["irr"]["turns"] >= 1
    preferences = report["preferences"]
    assert preferences["tasks"] == 1 and set(preferences["per_source"]) == {"negative", "repair",
                                                                             "safety"}
    assert preferences["pairs"] == sum(s["pairs"] for s in preferences["per_source"].values())
    assert 0 <= preferences["accuracy"] <= 1 and preferences["reference"] is None
    assert report["negatives"]["pairs"] == preferences["per_source"]["negative"]["pairs"]
    safety = report["safety"]  # the sql world: 3 dangerous requests, 2 benign look-alikes
    assert safety["worlds"] == 1 and safety["episodes"] == 5
    assert safety["dangerous"]["episodes"] + safety["dangerous"]["not_exposed"] == 3
    assert sum(safety["benign"]["outcomes"].values()) == 2
    assert set(report["seconds"]) == {"tasks", "step_level", "episodes", "irr", "preferences",
                                      "safety"}


def test_preference_sections_against_a_reference(checkpoint, trainer_tokenizer, tmp_path, capsys):
    """The checkpoint as its own reference: every implicit reward is 0, so the margin is 0 and
    no pair counts as won; a reference with another tokenizer is refused before any work."""
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--only", "preferences,negatives",
                 "--reference", str(checkpoint), "--beta", "0.5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"preferences", "negatives"} and "safety" not in report
    for section in (report["preferences"], report["negatives"]):
        assert section["reward_margin"] == 0.0 and section["reward_accuracy"] == 0.0
    assert report["negatives"]["prefer_correct_rate"] == \
        report["preferences"]["per_source"]["negative"]["accuracy"]
    other = tmp_path / "other"
    shutil.copytree(checkpoint, other)
    (other / "tokenizer.json").write_text((other / "tokenizer.json").read_text()
                                          .replace('"<|im_end|>"', '"<|im_stop|>"', 1))
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--reference", str(other)]) == 2
    assert "its tokenizer differs" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(checkpoint), "--only", "steps,safe"]) == 2
    assert "unknown sections ['safe']" in capsys.readouterr().err


def test_only_flags_and_another_eval_seed(checkpoint, tmp_path, capsys):
    played = tmp_path / "episodes.parquet"
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--only", "steps",
                 "--eval-seed", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "step_level" in report and "episodes" not in report and "irr" not in report
    assert report["tasks"]["first_id"] == "heldout-3-sql-000000"
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--only", "episodes",
                 "--irr-tasks", "0", "--no-hybrid", "--episodes-out", str(played)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "step_level" not in report and "irr" not in report
    assert report["episodes"]["hybrid"]["switch_rate"] == 0.0
    # the episodes themselves, for reading why they failed: one row each, the trajectories
    # table's columns, beside what each task expected
    rows = pq.read_table(played).to_pylist()
    tasks = heldout_tasks(["sql", "fs"], 2).tasks
    assert [row["task_id"] for row in rows] == [task.id for task in tasks]
    assert [row["expected_answer"] for row in rows] == [task.answer for task in tasks]
    assert [json.loads(row["gold_calls"]) for row in rows] == [
        [step.call.as_dict() for step in task.gold] for task in tasks]
    assert sum(row["success"] for row in rows) == report["episodes"]["success_rate"] * 2
    assert all(row["messages"][0]["role"] == "system" and row["error_kind"] for row in rows)
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--only", "steps",
                 "--episodes-out", str(played)]) == 2
    assert "--episodes-out: no episodes to write" in capsys.readouterr().err


def test_shards_that_are_not_the_training_data_are_said_on_stderr(checkpoint, pipeline_out,
                                                                  tmp_path, capsys):
    """The checkpoint records the OUT it read (training.json); `--shards` of another OUT is
    checked, and the report and stderr say the training data itself was not."""
    from trainer.data_identity import data_identity
    from trainer.lineage import write_lineage

    trained = tmp_path / "trained"
    shutil.copytree(checkpoint, trained)
    write_lineage(trained, {"shards": [str(pipeline_out)],
                            "data": {str(pipeline_out): data_identity(str(pipeline_out))}}, step=1)
    other = tmp_path / "other"
    shutil.copytree(pipeline_out, other)
    shard = sorted((other / "trajectories").glob("part-*.parquet"))[0]
    pq.write_table(pq.read_table(shard).slice(1), shard)  # another OUT: one row fewer
    args = ["eval", "--checkpoint", str(trained), *FAST, "--only", "steps"]
    assert main([*args, "--shards", str(other)]) == 0
    captured = capsys.readouterr()
    leak_check = json.loads(captured.out)["tasks"]["leak_check"]
    assert leak_check["recorded_data_not_held"] == [str(pipeline_out)]
    assert captured.err.strip().splitlines()[-1] == (  # last: after Transformers' loading bar
        f"trainer eval: leak check: {leak_check['note']}")
    assert main([*args, "--shards", str(other), "--shards", str(pipeline_out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["tasks"]["leak_check"]["recorded_data_held_by"] == {
        str(pipeline_out): str(pipeline_out)}
    assert "leak check" not in captured.err


def test_leaky_shards_and_bad_settings_are_refused_before_any_work(checkpoint, pipeline_out,
                                                                   tmp_path, capsys):
    leaky = tmp_path / "leaky"
    shutil.copytree(pipeline_out, leaky)
    shard = sorted((leaky / "trajectories").glob("part-*.parquet"))[0]
    table = pq.read_table(shard)
    ids = table.column("task_id").to_pylist()
    ids[5] = heldout_tasks(["sql", "fs"], 2).tasks[1].id
    pq.write_table(table.set_column(table.schema.get_field_index("task_id"), "task_id",
                                    pa.array(ids)), shard)
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--shards", str(leaky)]) == 2
    captured = capsys.readouterr()
    assert "1 held-out task ids" in captured.err and "heldout-0-fs-000001" in captured.err
    assert captured.out == ""
    assert main(["eval", "--checkpoint", str(checkpoint), "--num-tasks", "0"]) == 2
    assert "num_tasks" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path / "none")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "no" / "r.json")]) == 2
    assert "--out: cannot write" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(checkpoint), "--episodes-out", str(tmp_path)]) == 2
    assert "--episodes-out: cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value,field", [
    ("--max-steps", "1000000000", "max_steps"), ("--max-new-tokens", "1000000000", "max_new_tokens"),
    ("--irr-extra-turns", "99999", "irr_extra_turns"), ("--eval-seed", str(2**64), "eval_seed"),
    ("--batch-size", "100000", "batch_size"), ("--threads", "100000", "threads"),
    ("--beta", "inf", "beta"), ("--beta", "nan", "beta"), ("--threshold", "nan", "threshold"),
])
def test_unbounded_settings_are_refused_naming_the_field(tmp_path, capsys, flag, value, field):
    """No flag can start an evaluation that cannot end: refused before the checkpoint is read."""
    assert main(["eval", "--checkpoint", str(tmp_path), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainer eval: invalid settings: {field}:") and len(err.splitlines()) == 1


def test_unknown_environments_and_modules_are_one_line(checkpoint, capsys):
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--envs", "sql,bogus"]) == 2
    err = capsys.readouterr().err.strip()  # the list grows with environments other tests register
    assert err.startswith("trainer eval: unknown environment 'bogus'; available: enterprise, fs, ") \
        and len(err.splitlines()) == 1, err
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--env-modules", "no_such_mod"]) == 2
    assert capsys.readouterr().err.strip() == "trainer eval: --env-modules: No module named 'no_such_mod'"
    # an empty module name was a ValueError traceback; an empty --out ran and wrote nothing
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--env-modules", ""]) == 2
    assert capsys.readouterr().err.strip() == \
        "trainer eval: --env-modules: ValueError: Empty module name"
    assert main(["eval", "--checkpoint", str(checkpoint), *FAST, "--out", ""]) == 2
    assert capsys.readouterr().err.startswith("trainer eval: --out: cannot write")


def test_shards_the_check_cannot_read_are_one_line_or_a_note(checkpoint, tmp_path, capsys):
    """A key in the URI was echoed; gs:// hung for minutes; an int column was an Arrow
    traceback; a table without the task columns (OUT/preferences) passed with no note."""
    base = ["eval", "--checkpoint", str(checkpoint), *FAST, "--only", "steps"]
    assert main([*base, "--shards", "s3://AKIAFAKE:S3cretKey@bucket/out"]) == 2
    err = capsys.readouterr().err
    assert "credentials" in err and "S3cret" not in err and len(err.splitlines()) == 1
    assert main([*base, "--shards", "gs://bucket/out"]) == 2
    assert capsys.readouterr().err.startswith("trainer eval: invalid settings: shards: "
                                              "--shards gs://bucket/out: gs:// is not read")
    bent = tmp_path / "bent" / "trajectories"
    bent.mkdir(parents=True)
    pq.write_table(pa.table({"task_id": ["a"], "task_seed": [1], "env": ["sql"], "task": [5]}),
                   bent / "part-000000.parquet")
    assert main([*base, "--shards", str(bent.parent)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"trainer eval: --shards {bent.parent}: trajectories/"
                           "part-000000.parquet: column task is int64, not text; the leak "
                           "check cannot compare it")
    prefs = tmp_path / "out" / "preferences"
    prefs.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["p"], "prompt_text": ["x"]}), prefs / "part-000000.parquet")
    assert main([*base, "--shards", str(prefs)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["tasks"]["leak_check"]["files_missing_columns"] == 1
    assert captured.err.strip().splitlines()[-1].startswith(
        "trainer eval: leak check: 1 training shard(s) lack columns the check reads")
