"""What a failed `trainer fit` prints: the workers' own lines without Python traceback frames,
then where the frames are, then the one-line failure last (trainer.worker_logs), and no
progress bars where stderr is not a terminal. Before, one bad row gave a 4,780-line stderr
(~600 lines of frames from three processes, and Ray Data's progress bars redrawn line by
line), with the failure line in the middle of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.trainer.test_fit_bad_data import _with_unknown_span_kind
from tests.trainer.test_fit_not_retried import _trajectories_only
from trainer.worker_logs import FramelessPrinter, TracebackLines

ROOT = Path(__file__).resolve().parents[2]
FRAME = re.compile(r'^\s+File "|^Traceback \(most recent call last\)')

# one process's stream as Ray forwards it: Ray Train's worker logging the train loop's
# exception, a RayTaskError whose text carries the remote task's frames
WORKER_LOG = """\
Moving model to device: cpu
Error in training function:
Traceback (most recent call last):
  File "/work/trainer/recipes/sad.py", line 237, in train_loop_per_worker
    epoch, index, documents = next(stream)
                              ^^^^^^^^^^^^
  File "/venv/ray/_private/worker.py", line 1053, in get_objects
    raise value.as_instanceof_cause()
\x1b[36mray.exceptions.RayTaskError(DataError)\x1b[39m: \x1b[36mray::MapBatches(training_batches)()\x1b[39m (pid=15851, ip=192.0.2.2)
    for block in block_iter:
  File "/work/trainer/data_checks.py", line 72, in check_spans
    raise row_error(table, parent[element], "spans",

During handling of the above exception, another exception occurred:

trainer.data_checks.DataError: part-000000.parquet: row id='98' (row 0): span of unknown kind
[FailurePolicy] RAISE
  Source: controller
  Error count: 1 (max allowed: 0)
Split 0 epoch 0 get() failed after 0 rows: ray::MapBatches(training_batches)() (pid=15851, ip=1)
    for block in block_iter:
Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s).
"""


def test_frames_are_dropped_and_every_other_line_kept():
    stream = TracebackLines()
    kept = [line for line in WORKER_LOG.splitlines() if stream.keep(line)]
    assert kept == [
        "Moving model to device: cpu",
        "Error in training function:",
        "\x1b[36mray.exceptions.RayTaskError(DataError)\x1b[39m: \x1b[36mray::MapBatches("
        "training_batches)()\x1b[39m (pid=15851, ip=192.0.2.2)",
        "trainer.data_checks.DataError: part-000000.parquet: row id='98' (row 0): span of "
        "unknown kind",
        "[FailurePolicy] RAISE",
        "  Source: controller",  # indented, but no traceback's: kept
        "  Error count: 1 (max allowed: 0)",
        "Split 0 epoch 0 get() failed after 0 rows: ray::MapBatches(training_batches)() "
        "(pid=15851, ip=1)",
        "Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s).",
    ]
    assert stream.hidden == len(WORKER_LOG.splitlines()) - len(kept)


def test_a_traceback_split_over_batches_is_followed_per_process():
    printed = []
    printer = FramelessPrinter(printed.append)
    lines = WORKER_LOG.splitlines()
    for start in range(0, len(lines), 3):  # Ray forwards a process's lines in batches
        printer({"pid": 1, "is_err": True, "lines": lines[start:start + 3]})
        printer({"pid": 2, "is_err": True, "lines": ["    an indented line of another process"]})
    ours = [line for batch in printed if batch["pid"] == 1 for line in batch["lines"]]
    assert not any(FRAME.match(line) for line in ours) and len(ours) == 9, ours
    assert sum(batch["pid"] == 2 for batch in printed) == len(range(0, len(lines), 3))
    assert printer.hidden == len(lines) - 9


def test_with_run_worker_tracebacks_every_line_is_printed():
    printed = []
    printer = FramelessPrinter(printed.append)
    printer.hiding = False  # what hide_worker_tracebacks(False) sets
    batch = {"pid": 1, "is_err": True, "lines": WORKER_LOG.splitlines()}
    printer(batch)
    assert printed == [batch] and printer.hidden == 0


def test_progress_bars_by_default_only_on_a_terminal(monkeypatch):
    from trainer.config import load_config
    from trainer.fit import with_console_progress

    config = load_config(ROOT / "configs" / "train_tiny.yaml", [])
    assert config.run.progress is None
    for terminal in (True, False):
        monkeypatch.setattr(sys.stderr, "isatty", lambda terminal=terminal: terminal)
        assert with_console_progress(config).run.progress is terminal
        explicit = load_config(ROOT / "configs" / "train_tiny.yaml",
                               [f"run.progress={str(not terminal).lower()}"])
        assert with_console_progress(explicit).run.progress is (not terminal)


def test_a_failed_fit_prints_no_frames_and_its_reason_last(ray_head, pipeline_out,
                                                           trainer_tokenizer, tmp_path):
    out = _trajectories_only(pipeline_out, tmp_path)
    row_id = _with_unknown_span_kind(out)
    settings = [f"shards={out}", f"tokenizer={trainer_tokenizer}", f"run_dir={tmp_path / 'run'}",
                f"ray_address={ray_head.address}", "run.max_steps=2",
                "data.max_seq_len=256"]  # run.progress unset: stderr is a pipe, no bars
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "fit", "--config", str(ROOT / "configs" /
                                                                  "train_tiny.yaml"),
         *[arg for setting in settings for arg in ("--set", setting)]],
        cwd=ROOT, env=ray_head.env, capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr[-3000:]
    assert lines[-1].startswith(f"training failed: bad data: {out}/trajectories/"
                                f"part-000000.parquet: row id={row_id!r}"), lines[-5:]
    hint = re.fullmatch(r"\(([\d,]+) lines of Ray workers' tracebacks not shown here: they "
                        r"are in (\S+) on each node; run\.worker_tracebacks: true prints "
                        r"them\)", lines[-2])
    assert hint and int(hint[1].replace(",", "")) > 50, lines[-2]
    frames = [line for line in lines if FRAME.match(re.sub(r"^.*?\x1b\[0m ?", "", line))]
    assert not frames, frames[:5]
    # the workers' own account is still there, and the frames are in the named logs
    assert any("trainer.data_checks.DataError:" in line for line in lines[:-1])
    assert len(lines) < 150, len(lines)
    logged = "".join(path.read_text(errors="replace")
                     for path in Path(hint[2]).glob("worker-*.err"))
    assert "Traceback (most recent call last)" in logged and "check_spans" in logged
