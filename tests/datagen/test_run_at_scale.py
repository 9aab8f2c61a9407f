"""benchmarks/run_at_scale.py (issue 16's 5M run) outlives itself: a run longer than the
session that started it continues from its state file with --resume, counts its own death as
the run's kill, and refuses an OUT that holds a run or arguments that are not the run's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_script

run_at_scale = load_script("benchmarks/run_at_scale.py")


def test_an_out_that_holds_a_run_is_continued_only_with_resume(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "_chunks").mkdir(parents=True)
    assert run_at_scale.main(["--n", "100", "--chunk-size", "10", "--out", str(out)]) == 2
    assert "add --resume" in capsys.readouterr().err
    assert run_at_scale.main(["--n", "100", "--chunk-size", "10", "--out", str(out),
                              "--resume"]) == 2
    assert "--resume: no " in capsys.readouterr().err


def test_resume_refuses_arguments_that_are_not_the_runs(tmp_path, capsys):
    out = tmp_path / "out"
    state = {"chunks": 10, "kill_after": 5, "load_before": [0, 0, 0], "runs": [],
             "args": {"n": 100, "layout": "full", "chunk_size": 10, "workers": 0}}
    run_at_scale.state_path(out).write_text(json.dumps(state))
    assert run_at_scale.main(["--n", "200", "--chunk-size", "10", "--out", str(out),
                              "--resume"]) == 2
    assert "--n is 200, the run recorded 100" in capsys.readouterr().err


def test_resume_refuses_a_state_it_cannot_read(tmp_path, capsys):
    out = tmp_path / "out"
    run_at_scale.state_path(out).write_text('{"chunks": 10, "runs": [')  # cut mid-write
    assert run_at_scale.main(["--n", "100", "--chunk-size", "10", "--out", str(out),
                              "--resume"]) == 2
    assert "is not a state this script wrote (JSONDecodeError" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_whose_script_died_resumes_to_a_verified_end(tmp_path, ray_head):
    """The state a killed script leaves (its generate never finished): --resume runs generate
    once more, without a second planned kill, to exactly N verified trajectories."""
    out = tmp_path / "out"
    args = ["--n", "120", "--chunk-size", "40", "--out", str(out), "--address", ray_head.address,
            "--json", str(tmp_path / "report.json")]
    recorded = {key: str(value) if key == "out" or key == "json" else value
                for key, value in vars(run_at_scale.parse_args(args)).items() if key != "resume"}
    state = {"chunks": 3, "kill_after": 2, "load_before": [0, 0, 0], "args": recorded,
             "runs": [{"chunks_at_start": 0, "chunks_committed": 0, "finished": False,
                       "killed": False, "rc": None, "wall_s": 12.5, "peak_rss_mib": 900,
                       "peak_rss_pipeline_mib": 400, "rows_todo": 120}]}
    run_at_scale.state_path(out).write_text(json.dumps(state))
    done = subprocess.run([sys.executable, "benchmarks/run_at_scale.py", *args, "--resume"],
                          cwd=ROOT, env=ray_head.env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    first, last = report["runs"]
    assert not first["finished"] and last == {**last, "finished": True, "killed": False, "rc": 0,
                                               "chunks_at_start": 0, "chunks_committed": 3}
    assert report["ids"] == {"rows": 120, "unique": 120, "ok": True}
    assert report["verify"]["rc"] == 0
    assert report["generate_wall_s"] == pytest.approx(12.5 + last["wall_s"], abs=0.11)
    assert "interrupted with this script" in done.stdout
