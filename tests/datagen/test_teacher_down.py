"""A teacher that answers nothing: a chunk whose every episode failed in the teacher's backend
is not written (before: `generation_failed` rows, the chunk marked complete, the run "complete"
with exit 0, and the rerun after the fix found nothing to do), the run stops starting chunks
after `stop_after_failed_chunks` of them failed in a row, and the corrected config takes the
OUT over (it holds no complete chunk) and completes. The endpoint is real: a closed loopback
port, then a loopback server answering with the gold solutions (`ScriptedAgent`, a FAKE
teacher)."""

from __future__ import annotations

import json
import socket

import polars as pl
import pytest

from datagen.pipeline.chunk import TeacherAnsweredNone, check_teacher_answered
from datagen.pipeline.cli import main
from datagen.teachers.base import MIN_CALLS_JUDGED, failed_trajectory
from tests.datagen.teachers.fault_server import FaultServer, ScriptedAgent
from tests.datagen.teachers.helpers import make_tasks


def _failed(kinds: list[str]) -> list:
    tasks = make_tasks(len(kinds))
    return [failed_trajectory(task, "api", 0, RuntimeError(f"{kind} of {task.id}"), kind=kind)
            for task, kind in zip(tasks, kinds)]


def test_a_chunk_is_judged_only_when_every_episode_failed_in_the_backend():
    n = MIN_CALLS_JUDGED
    with pytest.raises(TeacherAnsweredNone, match=rf"^every episode failed in the teacher's "
                       rf"backend \(generation_failed {n - 1}, engine_lost 1\): RuntimeError: "
                       rf"generation_failed of "):
        check_teacher_answered(_failed(["generation_failed"] * (n - 1) + ["engine_lost"]))
    check_teacher_answered(_failed(["generation_failed"] * (n - 1)))  # too few to judge
    check_teacher_answered(_failed(["generation_failed"] * (n - 1) + ["wrong_answer"]))
    check_teacher_answered(_failed(["task_generation_failed"] * n))  # the tasks, not the teacher
    check_teacher_answered([])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_a_run_against_a_dead_endpoint_writes_nothing_stops_and_the_fixed_config_completes(
        ray_head, tmp_path, capsys):
    n, out = 48, tmp_path / "out"
    config = tmp_path / "run.yaml"

    def write_config(base_url: str) -> None:
        config.write_text(json.dumps({
            "num_trajectories": n, "chunk_size": 8, "envs": [{"name": "sql"}, {"name": "fs"}],
            "num_workers": 1, "max_in_flight": 1, "stop_after_failed_chunks": 2,
            "teacher": {"backend": "openai", "name": "api", "openai": {
                "base_url": base_url, "model": "fake", "max_retries": 0, "timeout_s": 20},
                "sampling": {"temperature": 0.0, "logprobs": 0}, "episode": {"max_turns": 12}}}))

    argv = ["generate", "--config", str(config), "--out", str(out), "--no-progress"]
    write_config(f"http://127.0.0.1:{_closed_port()}/v1")
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "INCOMPLETE, 2 chunk(s) failed" in text and "no chunk was written" in text, text
    assert "\nrows: none\n" in text and "spans:" not in text, text  # no empty tables
    assert ("note: stopped: 2 chunk(s) failed in a row (stop_after_failed_chunks), so 4 "
            "chunk(s) did not start") in text, text
    failed = [line for line in text.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED 2 chunks (0, 1): "), failed
    assert ("TeacherAnsweredNone: every episode failed in the teacher's backend "
            "(generation_failed 8): generation_failed: turn 0: ") in failed[0], failed
    assert not list((out / "_chunks").glob("chunk-*.json"))

    server = FaultServer(ScriptedAgent(make_tasks(n, envs=("sql", "fs")))).start()
    try:
        write_config(server.base_url)  # another config: it takes over the empty OUT
        assert main(argv) == 0, capsys.readouterr().err
    finally:
        server.stop()
    assert "(complete)" in capsys.readouterr().out
    rows = pl.read_parquet(out / "trajectories" / "*.parquet")
    assert rows.height == n and rows["id"].n_unique() == n and rows["success"].all()
