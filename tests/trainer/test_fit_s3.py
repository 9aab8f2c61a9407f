"""`python -m trainer fit` with its shards on object storage (s3://, moto's server on
127.0.0.1): `datagen generate` writes a tiny OUT into a bucket, the SAD recipe trains from the
URI (its Ray Data readers and train worker reach the store through the job's runtime_env, as
on a cluster), every trajectory of OUT is read exactly once an epoch, and the secret key shows
up in no output, metric or file the run writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.s3server import S3, job_env, s3  # noqa: F401 - s3 is a fixture
from tests.trainer.conftest import NUM_TRAJECTORIES
from trainer.data_identity import data_identity
from trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 48
MAX_SEQ_LEN = 1024


def _generate(uri: str, ray_head, s3: S3, config: Path) -> None:
    """The trainer fixtures' OUT (96 sql trajectories, chunks of 48), into the bucket."""
    config.write_text(f"num_trajectories: {NUM_TRAJECTORIES}\nchunk_size: {CHUNK}\n"
                      "envs:\n  - name: sql\n")
    result = subprocess.run([sys.executable, "-m", "datagen", "generate", "--config",
                             str(config), "--out", uri, "--address", ray_head.address,
                             "--no-progress"], cwd=ROOT, env=job_env(ray_head, s3),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def fit_command(ray_head, config: str, *settings: str) -> list[str]:
    return [sys.executable, "-m", "trainer", "fit", "--config", str(ROOT / "configs" / config),
            "--set", f"ray_address={ray_head.address}", *[a for s in settings
                                                          for a in ("--set", s)]]


@pytest.fixture(scope="module")
def s3_out(ray_head, s3, tmp_path_factory) -> str:
    uri = f"s3://{s3.bucket()}/runs/tiny"
    _generate(uri, ray_head, s3, tmp_path_factory.mktemp("s3gen") / "generate.yaml")
    return uri


@pytest.fixture(scope="module")
def sad_from_s3(ray_head, s3, s3_out, trainer_tokenizer, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("s3fit") / "sad"
    steps = NUM_TRAJECTORIES // 4 + 4  # past the first epoch (96 trajectories, 4 a batch)
    result = subprocess.run(fit_command(
        ray_head, "train_tiny.yaml", f"run_dir={run_dir}", f"shards={s3_out}",
        f"tokenizer={trainer_tokenizer}", f"run.max_steps={steps}", f"run.save_every={steps}",
        "run.progress=false", "data.batch_size=4", f"data.max_seq_len={MAX_SEQ_LEN}",
        "data.mch_rows=0"),  # LM documents only: a step's `tokens` are then its rows' tokens
        cwd=ROOT, env=job_env(ray_head, s3), capture_output=True, text=True, timeout=600)
    return run_dir, steps, result


def _lm_tokens_of(out: Path, tokenizer: Path) -> int:
    """Tokens of every trajectory document of a local OUT, as the SAD reader cuts them."""
    from trainer.documents import ReadSettings
    from trainer.readers.trajectories import trajectory_shaped_documents

    table = pq.read_table(out / "trajectories")
    rows, _ = trajectory_shaped_documents(
        table, ReadSettings(str(tokenizer), MAX_SEQ_LEN, True, False, (1.0, 1.0, 1.0)), 1.0)
    return sum(len(ids) for ids in rows.columns["input_ids"])


def test_sad_trains_from_an_s3_out_reading_every_row_once_an_epoch(
        sad_from_s3, s3, s3_out, pipeline_out, trainer_tokenizer):
    run_dir, steps, result = sad_from_s3
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["data"]["trajectory_shards"] == NUM_TRAJECTORIES // CHUNK
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert all(r["lm_loss"] > 0 for r in records)
    # the bucket holds the trainer fixtures' OUT (same config), so the tokens of the first
    # epoch are those of the local OUT's trajectories: every row read once, none twice
    ids = pl.scan_parquet(f"{s3_out}/trajectories/*.parquet",
                          storage_options=s3.polars_options()).select("id").collect()
    local = pl.read_parquet(pipeline_out / "trajectories", columns=["id"])
    assert sorted(ids["id"]) == sorted(local["id"])
    first_epoch = [r for r in records if r["epoch"] == records[0]["epoch"]]
    assert len(first_epoch) < len(records)  # the run went past the first epoch
    assert sum(r["tokens"] for r in first_epoch) == _lm_tokens_of(pipeline_out,
                                                                     trainer_tokenizer)
    assert Path(report["checkpoint"], "model.safetensors").exists()
    # what it read, recorded by the worker from one listing of the bucket: the same shards,
    # names and sizes, as the local OUT of the same config (trainer/data_identity.py)
    trained_on = json.loads(Path(report["checkpoint"], "training.json").read_text())
    assert trained_on["data"] == {s3_out: data_identity(str(pipeline_out))}


def test_no_key_in_the_runs_output_metrics_or_files(sad_from_s3, s3):
    run_dir, _, result = sad_from_s3
    assert s3.secret not in result.stdout + result.stderr
    for path in Path(run_dir).rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert s3.secret.encode() not in path.read_bytes(), path


def test_dpo_on_an_s3_out_keeps_its_reference_log_probs_beside_the_data(
        sad_from_s3, ray_head, s3, s3_out, trainer_tokenizer, tmp_path):
    """`dpo.reference: precomputed` with no `dpo.reference_dir`: the reference pass writes
    OUT/reference_logps/<key>/ into the bucket (marker last) and the training stream, in Ray
    Data tasks, reads it from there; the policy starts as its reference (loss log 2)."""
    from trainer.config import load_config
    from trainer.fit import absolute_paths
    from trainer.reference import reference_dir, reference_key

    sad_dir, _, sad = sad_from_s3
    assert sad.returncode == 0, sad.stderr[-2000:]
    run_dir = tmp_path / "dpo"
    settings = [f"run_dir={run_dir}", f"shards={s3_out}", f"tokenizer={trainer_tokenizer}",
                f"model.init_from={sad_dir}", "run.max_steps=2", "run.save_every=2",
                "run.progress=false", "data.max_seq_len=1536", "dpo.sources=[safety]",
                "dpo.rpo_alpha=0", "dpo.batch_size=2", "dpo.reference=precomputed",
                "dpo.anchor_weight=0"]  # the trajectory stream from s3:// is the SAD test's
    result = subprocess.run(fit_command(ray_head, "dpo_tiny.yaml", *settings), cwd=ROOT,
                            env=job_env(ray_head, s3), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{"):])
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["dpo_loss"] == pytest.approx(0.6931472, abs=1e-4)
    # where the values are: the key's directory under OUT on s3://, complete, one part per
    # preferences shard; a rerun computes the same key from the same listing and reuses it
    bucket, prefix = s3_out.removeprefix("s3://").split("/", 1)
    cfg = absolute_paths(load_config(ROOT / "configs" / "dpo_tiny.yaml", settings))
    directory = report["data"]["reference_dir"]
    assert directory.startswith(f"{s3_out}/reference_logps/")
    names = {key.rpartition("/")[2] for key in s3.keys(bucket, directory.split(bucket + "/")[1])}
    assert {"_COMPLETE", "manifest.json"} <= names
    shards = {key.rpartition("/")[2] for key in s3.keys(bucket, f"{prefix}/preferences/")}
    assert set() < {n for n in names if n.startswith("part-")} <= shards
    assert reference_dir(cfg, reference_key(cfg)) == directory
    assert s3.secret not in result.stdout + result.stderr
