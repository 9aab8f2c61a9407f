"""`recipe: ppo` killed and rerun: a `python -m trainer fit` SIGKILLed after a checkpoint,
then rerun into the same run_dir, continues at the next iteration and ends exactly where an
uninterrupted run ends - same metrics, same rollouts, same policy and value head - which
needs the policy, the value head, the optimizer and the sampling / shuffling seeds restored.
Rollout files of the iterations the checkpoint covers are not written again; none is
duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import torch

from trainer.config import load_config
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 3
# what must match between the uninterrupted and the resumed run (times differ)
COMPARED = ("loss", "reward", "kl_k1", "kl_k3", "entropy", "value_loss", "policy_loss",
            "clip_fraction", "grad_norm", "lr")
ROLLOUT_COLUMNS = ("id", "input_ids", "reward_total", "token_advantages")


def _overrides(run_dir: Path, tokenizer: Path, address: str) -> list[str]:
    return [f"run_dir={run_dir}", f"tokenizer={tokenizer}", "model.init_from=null",
            "model.builder=tiny", "model.use_landmark=false", "ppo.envs=[sql]",
            "ppo.tasks_per_iteration=2", "ppo.group_size=2", "ppo.max_tokens_per_turn=8",
            "ppo.max_turns=2", "ppo.minibatch_size=2", f"run.max_steps={ITERATIONS}",
            "run.save_every=1", "run.progress=false", "optim.lr=1e-3", f"ray_address={address}"]


def _registered_steps(run_dir: Path) -> list[int]:
    """Steps of the checkpoints Ray Train has registered (what a rerun resumes from; a
    checkpoint directory is copied in before its registration)."""
    try:
        snapshot = json.loads((run_dir / "checkpoint_manager_snapshot.json").read_text())
    except (FileNotFoundError, ValueError):  # not written yet, or being replaced right now
        return []
    return sorted(result["metrics"]["step"] for result in snapshot["checkpoint_results"])


def _weights(checkpoint: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors = {}
    for name in ("model.safetensors", "value_head.safetensors"):
        tensors.update({f"{name}:{k}": v for k, v in load_file(Path(checkpoint) / name).items()})
    return tensors


def _rollouts(run_dir: Path) -> dict[str, pl.DataFrame]:
    return {path.name: pl.read_parquet(path).select(ROLLOUT_COLUMNS)
            for path in sorted((run_dir / "rollouts").glob("*.parquet"))}


@pytest.fixture(scope="module")
def uninterrupted(ray_head, tiny_tokenizer_dir, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("ppo_whole") / "run"
    cfg = load_config(ROOT / "configs" / "ppo_tiny.yaml",
                      _overrides(run_dir, tiny_tokenizer_dir, ray_head.address))
    result = fit(cfg)
    return run_dir, result


def _fit_until_first_checkpoint_then_kill(overrides: list[str], run_dir: Path, env: dict) -> int:
    """Start `python -m trainer fit`, SIGKILL it once a checkpoint exists; the newest
    checkpoint's step at the kill."""
    command = [sys.executable, "-m", "trainer", "fit", "--config", "configs/ppo_tiny.yaml"]
    for item in overrides:
        command += ["--set", item]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 600  # generous: a loaded shared machine (CI: seconds)
    while not _registered_steps(run_dir) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    steps = _registered_steps(run_dir)
    assert steps, f"no checkpoint before the deadline: {stderr.decode()[-3000:]}"
    return steps[-1]


def test_a_killed_run_resumes_at_the_next_iteration_and_ends_as_the_uninterrupted_one(
        uninterrupted, ray_head, tiny_tokenizer_dir, tmp_path):
    from trainer.fit import fit

    whole_dir, whole = uninterrupted
    run_dir = tmp_path / "run"
    overrides = _overrides(run_dir, tiny_tokenizer_dir, ray_head.address)
    env = dict(ray_head.env, RAY_ADDRESS=ray_head.address)  # Ray Train's helpers read it
    killed_at = _fit_until_first_checkpoint_then_kill(overrides, run_dir, env)
    assert killed_at < ITERATIONS, "the kill must land before the run ends"
    finished = {path.name: (path.stat().st_mtime_ns, path.read_bytes())
                for path in (run_dir / "rollouts").glob("*.parquet")
                if int(path.name.split("-")[1]) < killed_at}
    assert len(finished) == killed_at  # one file per checkpointed iteration
    time.sleep(1.0)  # let Ray reap the dead driver's workers and actors

    resumed = fit(load_config(ROOT / "configs" / "ppo_tiny.yaml", overrides))

    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, ITERATIONS + 1))  # each once
    for path, (mtime, content) in finished.items():  # not played again
        now = run_dir / "rollouts" / path
        assert now.stat().st_mtime_ns == mtime and now.read_bytes() == content
    files = _rollouts(run_dir)
    assert list(files) == [f"iter-{i:06d}-rank0.parquet" for i in range(ITERATIONS)]
    ids = pl.concat(list(files.values()))["id"]
    assert ids.n_unique() == ids.len() == ITERATIONS * 4

    # the resumed run is the uninterrupted one: same numbers, same rollouts, same weights
    expected = read_metrics(whole_dir / "metrics.jsonl")
    for got, want in zip(records, expected):
        for name in COMPARED:
            assert got[name] == pytest.approx(want[name], rel=1e-5, abs=1e-7), (got["step"], name)
    for name, frame in _rollouts(whole_dir).items():
        assert files[name].equals(frame), name
    after, reference = _weights(resumed.checkpoint), _weights(whole.checkpoint)
    assert after.keys() == reference.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(after[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
    assert any(t.abs().sum() > 0 for n, t in after.items() if n.startswith("value_head"))


def test_a_rerun_drops_rollouts_written_after_the_last_checkpoint(tmp_path):
    from trainer.recipes.ppo import discard_lost_rollouts, rollout_files

    directory = tmp_path / "rollouts"
    directory.mkdir()
    for name in ("iter-000000-rank0", "iter-000001-rank0", "iter-000002-rank0",
                 "iter-000002-rank1"):  # the killed run had two workers
        (directory / f"{name}.parquet").write_bytes(b"x")
    (directory / "iter-000003-rank0.parquet.tmp").write_bytes(b"x")  # cut mid-write
    lost = discard_lost_rollouts(str(tmp_path), 2)
    assert sorted(p.name for p in lost) == ["iter-000002-rank0.parquet",
                                            "iter-000002-rank1.parquet",
                                            "iter-000003-rank0.parquet.tmp"]
    assert not list(directory.glob("*.tmp"))
    assert [p.name for p in rollout_files(str(tmp_path))] == ["iter-000000-rank0.parquet",
                                                              "iter-000001-rank0.parquet"]
