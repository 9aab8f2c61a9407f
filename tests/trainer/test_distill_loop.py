"""`python -m trainer loop` at the smallest size, on the session's local Ray: round 0 (oracle
data -> SAD -> held-out eval) and round 1 (round 0's student plays fresh tasks, the rule critic
repairs its failures, the student trains on them plus replay, eval).

One loop run serves the end-to-end tests: it is started as a subprocess, killed while round 1
is under way (after round 0 is complete), and rerun to the end as one `ray job submit` to the
same head (the command a cluster user runs), so the same run shows that a killed loop continues
without redoing a complete round, and that the loop runs as a Ray job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from trainer.config import ConfigError
from trainer.loop import load_loop_config
from trainer.loop.config import loop_fingerprint
from trainer.loop.mix import build_mix, replay_count
from trainer.loop.rounds import RoundDir
from trainer.loop.run import _Phases, make_plan, stop_reason
from trainer.loop.table import COLUMNS, write_table

ROOT = Path(__file__).resolve().parents[2]
KILL_TIMEOUT_S = 900  # generous: the shared CI host runs at load 20-50


def _write_configs(tmp: Path, tokenizer: Path) -> Path:
    (tmp / "gen.yaml").write_text(yaml.safe_dump({
        "num_trajectories": 24, "chunk_size": 24, "envs": [{"name": "sql"}], "seed": 5,
        "negatives": {"enabled": False}, "critics": {"enabled": False}, "num_workers": 1}))
    loop = {
        "out": str(tmp / "loop"), "rounds": 2, "seed": 0,
        "round0": {"generate": str(tmp / "gen.yaml")},
        "student": {"num_tasks": 6, "chunk_size": 6, "max_turns": 2, "max_tokens_per_turn": 12,
                    "temperature": 1.0, "max_batch_size": 6},
        "train": {"config": str(ROOT / "configs" / "train_tiny.yaml"),
                  "set": [f"tokenizer={tokenizer}", "run.progress=false", "run.save_every=0",
                          "data.max_seq_len=1024", "data.batch_size=2", "data.mch_rows=0",
                          "data.bucket_pool_batches=2", "model.use_mch=false",
                          "optim.warmup_steps=1"],
                  "round0_steps": 3, "steps_per_round": 2, "replay_share": 0.5},
        "eval": {"envs": ["sql"], "num_tasks": 2, "irr_tasks": 2, "max_steps": 2,
                 "max_new_tokens": 8, "batch_size": 2, "threads": 1}}
    path = tmp / "loop.yaml"
    path.write_text(yaml.safe_dump(loop))
    return path


@pytest.fixture(scope="module")
def loop_tokenizer(tmp_path_factory) -> Path:
    """A 4k `lines` BPE (the tiny builder's vocabulary): an oracle trajectory is ~450 tokens."""
    from datagen.tokenizer import build_bpe_tokenizer
    from tests.datagen.helpers import oracle_texts

    out = tmp_path_factory.mktemp("loop_tokenizer")
    build_bpe_tokenizer(oracle_texts(40), vocab_size=4000, out_dir=out, pretokenizer="lines")
    return out


def _wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the loop exited ({proc.returncode}) before {path} appeared:\n"
                                 + log.read_text(errors="replace")[-3000:])
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.5)


@dataclass(frozen=True)
class JobResult:
    rows: list[dict]    # the round table the rerun left (OUT/rounds.jsonl)
    stopped: str        # why it ended, from the job's last line
    printed: str        # the job's output


def _submit_loop(ray_head, config_path: Path, out: Path) -> JobResult:
    """`ray job submit -- python -m trainer loop --config FILE`; its summary line and table."""
    from tests.conftest import ray_job_submit

    done = ray_job_submit(ray_head, entrypoint=["python", "-m", "trainer", "loop", "--config",
                                                str(config_path)], timeout=KILL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [json.loads(line) for line in done.stdout.splitlines()
               if line.startswith('{"out": ')]
    assert summary and summary[-1]["out"] == str(out), done.stdout[-3000:]
    rows = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert summary[-1]["rounds"] == len(rows)
    return JobResult(rows, summary[-1]["stopped"], done.stdout)


@pytest.fixture(scope="module")
def loop_run(ray_head, loop_tokenizer, tmp_path_factory):
    """The loop killed in round 1, then rerun to the end as a Ray job; what the kill left, and
    the result."""
    tmp = tmp_path_factory.mktemp("loop")
    config_path = _write_configs(tmp, loop_tokenizer)
    out = tmp / "loop"
    log = (tmp / "killed_loop.log").open("wb")  # its stderr, read when it fails
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "loop", "--config", str(config_path)],
                            cwd=ROOT, env={**ray_head.env, "RAY_ADDRESS": ray_head.address},
                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        _wait_for(out / "round-001" / "generate.json", proc, tmp / "killed_loop.log",
                  KILL_TIMEOUT_S)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    killed = {"round0": (out / "round-000" / "round.json").stat().st_mtime_ns,
              "generate": (out / "round-001" / "generate.json").stat().st_mtime_ns,
              "round1_complete": (out / "round-001" / "round.json").exists(),
              "rows": (out / "rounds.jsonl").read_text().splitlines()}
    return out, killed, _submit_loop(ray_head, config_path, out)


def test_round_zero_then_round_one_end_to_end(loop_run):
    out, _, result = loop_run
    assert [row["round"] for row in result.rows] == [0, 1] and result.stopped == "ran 2 rounds"
    table = result.rows
    assert (out / "rounds.md").read_text().strip() in result.printed  # the job printed it
    zero, one = table
    assert zero["train_steps"] == 3 and one["train_steps"] == 2
    for row in table:  # every figure of the round table measured on the same held-out tasks
        assert row["eval_tasks"] == 2 and 0 <= row["success_rate"] <= 1
        assert row["act_ce"] > 0 and row["syntax_error_rate"] is not None
        assert row["irr_n"] + row["irr_skipped"] == 2 and 0 <= row["irr"] <= 1
    assert one["rollouts"] == 6 and one["repairs"] >= 1
    assert one["train_rows"] == one["repairs"] + one["replay_rows"]
    assert one["replay_rows"] == replay_count(one["repairs"], 0.5, 24)
    assert one["checkpoint"].startswith(str(out / "round-001" / "train"))
    assert (out / "rounds.md").read_text().startswith("| round | success |")
    assert "| IRR | IRR n |" in (out / "rounds.md").read_text()
    reports = [json.loads((out / f"round-00{i}" / "eval.json").read_text()) for i in (0, 1)]
    assert reports[0]["tasks"]["ids_sha256"] == reports[1]["tasks"]["ids_sha256"]
    leak_check = reports[1]["tasks"]["leak_check"]
    assert leak_check["shards"][-1] == str(out / "round-001" / "data")
    mix = str(out / "round-001" / "mix")  # what round 1 trained on is among what was checked
    assert mix in leak_check["shards"] and leak_check["recorded_data_held_by"][mix] == mix
    assert all(report["tasks"]["leak_check"]["recorded_data_not_held"] == []
               and report["tasks"]["leak_check"]["recorded_data_held_by"] for report in reports)


def test_round_one_trains_from_round_zeros_student(loop_run):
    import torch
    from safetensors.torch import load_file

    out, _, result = loop_run
    zero, one = (Path(row["checkpoint"]) for row in result.rows)
    config = json.loads((out / "round-001" / "generate.json").read_text())
    assert config["teacher"] == "policy" and config["round"] == 1 and config["seed"] == 6
    before, after = load_file(zero / "model.safetensors"), load_file(one / "model.safetensors")
    assert before.keys() == after.keys()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert changed  # trained on from round 0's weights (init_from), not a fresh model
    assert max((before[n] - after[n]).abs().max().item() for n in changed) < 0.1


def test_killed_loop_continues_without_redoing_a_complete_round(loop_run):
    out, killed, _ = loop_run
    assert not killed["round1_complete"] and len(killed["rows"]) == 1
    assert (out / "round-000" / "round.json").stat().st_mtime_ns == killed["round0"]
    assert (out / "round-001" / "generate.json").stat().st_mtime_ns == killed["generate"]
    assert json.loads(killed["rows"][0])["round"] == 0
    trajectories = list((out / "round-001" / "data" / "trajectories").glob("part-*.parquet"))
    assert len(trajectories) == 1  # the student's rollouts: generated once, not again


def test_repairs_come_from_the_students_failed_episodes(loop_run):
    out, _, result = loop_run
    data = out / "round-001" / "data"
    students = pq.read_table(data / "trajectories").to_pylist()
    repairs = pq.read_table(data / "repairs").to_pylist()
    by_id = {row["id"]: row for row in students}
    assert {row["round"] for row in students} == {1}
    assert {row["teacher"] for row in students} == {"student-r0"}
    assert len(repairs) == result.rows[1]["repairs"]
    for repair in repairs:
        source = by_id[repair["source_id"]]  # a real rollout of this round's student
        assert not source["success"] and repair["success"] and repair["round"] == 1
        assert repair["task_id"] == source["task_id"]
        errors = [s for s in repair["spans"] if s["kind"] == "ERROR"]
        assert {s["step"] for s in errors} == {repair["error_step"]}
        # ERROR (no loss) is what the student wrote at its first wrong step, reasoning and
        # call, as it wrote it; nothing of that turn is a training target
        wrong = "".join(repair["text"][s["start"]:s["end"]] for s in errors)
        turn = [s for s in source["spans"]
                if s["kind"] in ("REASON", "ACT") and s["step"] == repair["error_step"]]
        assert wrong == "".join(source["text"][s["start"]:s["end"]] for s in turn)
        assert not [s for s in repair["spans"] if s["kind"] in ("REASON", "ACT")
                    and s["step"] == repair["error_step"]]
        assert repair["critique"] and any(s["kind"] == "REASON" and s["step"] ==
                                          repair["error_step"] + 1 for s in repair["spans"])
    mixed = pq.read_table(out / "round-001" / "mix" / "trajectories").to_pylist()
    new = [row for row in mixed if row["mix_origin"] == "new"]
    assert sorted(row["id"] for row in new) == sorted(row["id"] for row in repairs)
    assert all(row["round"] == 0 for row in mixed if row["mix_origin"] == "replay")


# -- without Ray ------------------------------------------------------------------------------

def test_replay_share_and_a_seeded_mix(tmp_path):
    import pyarrow as pa

    assert replay_count(10, 0.5, 100) == 10 and replay_count(10, 0.2, 100) == 2
    assert replay_count(10, 0.5, 3) == 3 and replay_count(0, 0.5, 100) == 0
    columns = {"id": ["a", "b"], "text": ["x", "y"], "spans": [[], []], "success": [True, True],
               "n_steps": [1, 1]}
    new = pa.table(columns)
    pool = pa.table({**columns, "id": ["p", "q"]})
    counts = build_mix(tmp_path / "m", new, pool, 0.5, seed=1)
    assert counts == {"new_rows": 2, "replay_rows": 2, "replay_pool": 2, "rows": 4,
                      "replay_share": 0.5}
    again = build_mix(tmp_path / "n", new, pool, 0.5, seed=1)
    first = pq.read_table(tmp_path / "m" / "trajectories").column("id").to_pylist()
    assert counts == again and first == pq.read_table(tmp_path / "n" / "trajectories") \
        .column("id").to_pylist()


def test_stop_when_a_round_gains_less_than_the_threshold():
    config = load_loop_config(None, ["out=o", "round0.data=d", "train.config=c",
                                     "stop.min_gain=0.05"])
    rounds = [{"round": 0, "eval": {"success_rate": 0.2}},
              {"round": 1, "eval": {"success_rate": 0.3}}]
    assert stop_reason(config, rounds) is None
    rounds.append({"round": 2, "eval": {"success_rate": 0.32}})
    assert "round 2 gained +0.0200 success_rate" in stop_reason(config, rounds)
    unlimited = load_loop_config(None, ["out=o", "round0.data=d", "train.config=c"])
    assert stop_reason(unlimited, rounds) is None


def test_the_fingerprint_knows_config_files_by_content_not_path(tmp_path):
    for name in ("here", "uploaded"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.yaml").write_text("recipe: sad\n")

    def fingerprint(name: str) -> str:
        return loop_fingerprint(load_loop_config(None, [
            "out=o", "round0.data=d", f"train.config={tmp_path / name / 'train.yaml'}"]))

    assert fingerprint("here") == fingerprint("uploaded")  # a Ray job's copy of the same file
    (tmp_path / "uploaded" / "train.yaml").write_text("recipe: sad\nrun: {max_steps: 5}\n")
    assert fingerprint("here") != fingerprint("uploaded")  # edited: later rounds would differ


def test_bad_configs_fail_before_any_work_naming_the_field(tmp_path, loop_tokenizer):
    path = _write_configs(tmp_path, loop_tokenizer)
    with pytest.raises(ConfigError, match="student.num_taks: unknown field"):
        load_loop_config(path, ["student.num_taks=3"])
    with pytest.raises(ConfigError, match="critic: critic.backend 'llm' needs critic.llm"):
        load_loop_config(path, ["critic.backend=llm"])
    with pytest.raises(ConfigError, match="(?s)train: .*data.batch_size"):
        make_plan(load_loop_config(path, ["train.set=[data.batch_size=0]"]))
    with pytest.raises(ConfigError, match="tokenizer .* is not a directory"):
        make_plan(load_loop_config(path, [f"train.set=[tokenizer={tmp_path}/none]"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="tokenizer .*empty has no tokenizer.json"):
        make_plan(load_loop_config(path, [f"train.set=[tokenizer={tmp_path}/empty]"]))
    with pytest.raises(ConfigError, match="eval.max_steps: Input should be less than or equal to 256"):
        load_loop_config(path, ["eval.max_steps=100000"])
    with pytest.raises(ConfigError, match="student.max_turns: Input should be less than or equal"):
        load_loop_config(path, ["student.max_turns=100000"])
    with pytest.raises(ConfigError, match="round0.checkpoint"):
        make_plan(load_loop_config(path, [f"round0.checkpoint={tmp_path}"]))
    with pytest.raises(ConfigError, match="(?s)student/critic: .*critics"):
        make_plan(load_loop_config(path, ["critic.backend=llm", "critic.llm={backend: oracle}"]))
    with pytest.raises(ConfigError, match="round0.generate: .*negatives.kindz: unknown field"):
        make_plan(load_loop_config(path, ["round0.generate_set={negatives.kindz: [x]}"]))
    with pytest.raises(ConfigError, match="^round0.data: .* has no manifest.json"):
        make_plan(load_loop_config(path, ["round0.generate=null", f"round0.data={tmp_path}"]))
    assert not (tmp_path / "loop").exists()  # nothing was started


def test_configs_that_failed_only_rounds_later_fail_at_the_start(tmp_path, loop_tokenizer):
    """Each of these used to pass the start's checks and fail after round 0 or 1 (hours of
    work), in a traceback or a worker (the audit of 2026-12-06)."""
    path = _write_configs(tmp_path, loop_tokenizer)
    with pytest.raises(ConfigError, match=r"^student/critic \(round 2\): seed: Input should be "
                                          "less than or equal to 9223372036854775807"):
        make_plan(load_loop_config(path, ["rounds=3", f"student.seed_stride={2**62}"]))
    with pytest.raises(ConfigError, match="^eval.envs: unknown environment 'bogus'"):
        make_plan(load_loop_config(path, ["eval.envs=[bogus]"]))
    with pytest.raises(ConfigError, match="student.temperature: 1e-300 is neither 0 "
                                          r"\(greedy\) nor within \[1e-05, 100\]"):
        load_loop_config(path, ["student.temperature=1e-300"])
    for field in ("out", "round0.generate", "round0.checkpoint", "train.config"):
        with pytest.raises(ConfigError, match=f"{field}: String should have at least 1 character"):
            load_loop_config(path, [f"{field}=''"])  # "" was the working directory
    not_an_out = tmp_path / "not-an-out"
    not_an_out.mkdir()
    (not_an_out / "manifest.json").write_text("{}")
    for generate in ("null", "''"):  # round0.data read for the base config, or only used
        overrides = [f"round0.data={not_an_out}"] + (["round0.generate=null"] if generate ==
                                                     "null" else [])
        with pytest.raises(ConfigError, match="^round0.data: .* is not a datagen manifest"):
            make_plan(load_loop_config(path, overrides))
    assert not (tmp_path / "loop").exists()


def test_the_loops_dpo_phase_runs_without_the_trajectory_anchor(tmp_path):
    """The shipped DPO config anchors on trajectories; in a round those are the student's own
    rollouts, so the loop's DPO phase turns the anchor off (it trains on the repair pairs)."""
    from trainer.loop.train import dpo_train_config

    config = load_loop_config(ROOT / "configs" / "loop_tiny.yaml", [
        "dpo.enabled=true", f"dpo.config={ROOT / 'configs' / 'dpo_tiny.yaml'}"])
    dpo = dpo_train_config(config, tmp_path / "data", tmp_path / "dpo", str(tmp_path / "start"))
    assert dpo.recipe == "dpo" and not dpo.anchored and dpo.dpo.sources == ("repair",)


def test_a_second_loop_in_a_held_out_is_refused_naming_the_first(tmp_path, loop_tokenizer,
                                                                  capsys, monkeypatch):
    """Two loops in one OUT would run the same round's phases twice at once: the second is
    refused before Ray, naming the first (pid, command)."""
    import trainer.fit
    from tests.datagen.helpers import start_lock_holder
    from trainer.__main__ import main

    monkeypatch.setattr(trainer.fit, "init_ray", lambda *a, **k: pytest.fail("reached Ray"))
    path = _write_configs(tmp_path, loop_tokenizer)
    holder = start_lock_holder(tmp_path / "loop", "f" * 16, "first-loop")
    try:
        assert main(["loop", "--config", str(path)]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.startswith(f"trainer loop: {tmp_path / 'loop'} is in use by another trainer loop "
                          f"run (pid {holder.pid} on ") and "first-loop" in err, err
    assert not (tmp_path / "loop" / "loop.json").exists()  # nothing was claimed


def test_a_round_manifest_takes_each_phases_wall_time(tmp_path):
    """An eval report's `seconds` is a dict per section (its wall time is `wall_seconds`); the
    manifest once round()ed that dict, and every round 0 ended in a TypeError."""
    directory = RoundDir(tmp_path, 0)
    phases = _Phases(directory)
    phases.run("generate", lambda: {"seconds": 2.5, "rollouts": 4, "succeeded": 4, "repairs": 0})
    phases.run("train", lambda: {"seconds": 10.25, "steps": 3, "checkpoint": "c"})
    report = phases.run("eval", lambda: {"seconds": {"tasks": 0.1, "episodes": 0.4},
                                         "wall_seconds": 0.75, "tasks": {"count": 2}})
    manifest = phases.manifest("c", report)
    assert manifest["phase_seconds"] == {"generate": 2.5, "train": 10.25, "eval": 0.75}
    assert manifest["seconds"] == 13.5 and directory.complete() == manifest


def _eval_report(irr: dict | None) -> dict:
    """A `trainer eval` report as `evaluate` writes it (the sections the round table reads)."""
    report = {"tasks": {"count": 4}, "wall_seconds": 1.0,
              "episodes": {"success_rate": 0.25, "syntax_error_rate": 0.1, "mean_steps": 3.5},
              "step_level": {"next_call_exact_match": 0.5, "act_token_accuracy": 0.75,
                             "right_tool_rate": 0.8, "schema_valid_rate": 0.9,
                             "reason_ce": 2.0, "act_ce": 0.7}}
    return report if irr is None else {**report, "irr": irr}


def test_the_round_table_carries_each_rounds_irr(tmp_path):
    """IRR from the eval report's `irr` section (`critics.irr` via `trainer eval`) lands in
    rounds.jsonl and as a column of rounds.md with its episode count; a round evaluated
    without IRR shows none (not 0)."""
    from critics.irr import Episode, IRRReport

    episodes = [Episode("sql", "wrong_tool", 1, True, 2), Episode("sql", "type_error", 2, False, 4),
                Episode("fs", "wrong_tool", 0, True, 3)]
    measured = IRRReport(episodes, skipped=1).summary() | {"extra_turns": 2, "turns": 9}
    manifests = []
    for index, irr in enumerate((measured, None)):
        phases = _Phases(RoundDir(tmp_path, index))
        phases.run("train", lambda: {"seconds": 1.0, "steps": 2, "checkpoint": "c"})
        report = phases.run("eval", lambda irr=irr: _eval_report(irr))
        manifests.append(phases.manifest("c", report))
    rows = write_table(tmp_path, manifests)
    assert rows[0]["irr"] == round(2 / 3, 4) and rows[0]["irr_n"] == 3
    assert rows[0]["irr_skipped"] == 1
    assert rows[1]["irr"] is None and rows[1]["irr_n"] is None
    assert [json.loads(line)["irr"] for line in (tmp_path / "rounds.jsonl").read_text()
            .splitlines()] == [rows[0]["irr"], None]
    header, _, first, second = (tmp_path / "rounds.md").read_text().splitlines()[:4]
    names = [cell.strip() for cell in header.strip("|").split("|")]
    assert names == [name for name, _, _ in COLUMNS]
    cells = [dict(zip(names, (c.strip() for c in line.strip("|").split("|"))))
             for line in (first, second)]
    assert (cells[0]["IRR"], cells[0]["IRR n"]) == ("0.667", "3")
    assert (cells[1]["IRR"], cells[1]["IRR n"]) == ("-", "-")
    assert cells[0]["success"] == "0.250" and cells[0]["ACT CE"] == "0.700"
