"""Preflight without Ray: paths resolved on the driver, the OUT probe, what a worker reports
missing, and a summary that never calls a failed run complete."""

from __future__ import annotations

import os

import pytest

from datagen.config import GenerateConfig
from datagen.pipeline.preflight import OutProbe, resolve_paths, worker_problems
from datagen.pipeline.shards import ChunkRecord, ShardInfo
from datagen.pipeline.summary import RunSummary, stage_seconds

OPENAI = {"backend": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                          "api_key_env": "DATAGEN_TEST_NOT_SET_ANYWHERE"}}


def test_relative_out_and_local_model_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "model").mkdir()
    config = GenerateConfig(out="rel/out", tokenizer="tok",
                            teacher={"backend": "hf", "hf": {"model": "model",
                                                             "tokenizer": "Org/hub-name"}})
    resolved = resolve_paths(config)
    assert resolved.out == str(tmp_path / "rel" / "out")
    assert resolved.tokenizer == str(tmp_path / "tok")
    assert resolved.teacher.hf.model == str(tmp_path / "model")
    assert resolved.teacher.hf.tokenizer == "Org/hub-name"  # not a local path: left alone
    kept = resolve_paths(config, keep_relative=True)  # a job whose workers share the cwd
    assert kept.out == str(tmp_path / "rel" / "out") and kept.tokenizer == "tok"


def test_a_tilde_is_the_home_directory_as_in_a_shell(tmp_path, monkeypatch):
    # `out: ~/x` used to write into a directory named `~` under the working directory
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "tok").mkdir(parents=True)
    config = GenerateConfig(out="~/runs/x", tokenizer="~/tok")
    for keep_relative in (False, True):
        resolved = resolve_paths(config, keep_relative=keep_relative)
        assert resolved.out == str(tmp_path / "home" / "runs" / "x")
        assert resolved.tokenizer == str(tmp_path / "home" / "tok")


def test_a_tokenizer_directory_without_a_tokenizer_is_named(tmp_path):
    # used to fail building the processor with a transformers message cut at 300 characters
    # that never said which field
    (tmp_path / "empty").mkdir()
    config = GenerateConfig(out=str(tmp_path), tokenizer=str(tmp_path / "empty"))
    [problem] = worker_problems(config, OutProbe.create(tmp_path))
    assert problem.startswith(f"tokenizer {tmp_path / 'empty'} holds no tokenizer (none of "
                              "tokenizer.json, tokenizer_config.json")
    (tmp_path / "empty" / "tokenizer.json").write_text("{}")
    assert worker_problems(config, OutProbe.create(tmp_path)) == []


def test_the_probe_tells_a_worker_that_sees_out_from_one_that_does_not(tmp_path):
    probe = OutProbe.create(tmp_path)
    assert probe.check() is None
    elsewhere = OutProbe(str(tmp_path / "other-node" / "probe-x"), probe.token)
    message = elsewhere.check()
    assert "OUT is not visible here" in message and "every node mounts" in message
    probe.remove()
    assert not os.path.exists(probe.path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_the_probe_reports_an_out_the_worker_cannot_write(tmp_path):
    probe = OutProbe.create(tmp_path)
    tmp_path.chmod(0o555)
    try:
        assert "cannot write to OUT" in probe.check()
    finally:
        tmp_path.chmod(0o755)


def test_a_missing_key_variable_and_model_path_are_reported_with_how_to_provide_them(tmp_path):
    config = GenerateConfig(out=str(tmp_path), teacher=OPENAI,
                            tokenizer=str(tmp_path / "no-such-tokenizer"))
    problems = worker_problems(config, OutProbe.create(tmp_path))
    assert len(problems) == 2
    key, path = problems
    assert "$DATAGEN_TEST_NOT_SET_ANYWHERE" in key and "--runtime-env-json" in key
    assert "Kubernetes Secret" in key
    assert "no-such-tokenizer does not exist here" in path


def test_a_config_a_worker_can_run_has_no_problems(tmp_path, monkeypatch):
    monkeypatch.setenv("DATAGEN_TEST_NOT_SET_ANYWHERE", "k")
    config = GenerateConfig(out=str(tmp_path), teacher=OPENAI)
    assert worker_problems(config, OutProbe.create(tmp_path)) == []


def _model_dir(tmp_path, config_json: str):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(config_json)
    (model / "tokenizer.json").write_text("{}")
    return model


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_a_logit_bias_past_a_local_models_vocabulary_is_a_worker_problem(tmp_path, backend):
    """Before, hf found it only once its weights loaded, and vLLM in each chunk once an
    engine had started; the worker reads the model's config.json (bounded) instead."""
    model = _model_dir(tmp_path, '{"model_type": "qwen2", "vocab_size": 1000}')
    teacher = {"backend": backend, backend: {"model": str(model)},
               "sampling": {"logit_bias": {1000: 5.0, 3: -1.0, 70000: 1.0}}}
    config = GenerateConfig(out=str(tmp_path), teacher=teacher)
    assert worker_problems(config, OutProbe.create(tmp_path)) == [
        f"teacher.sampling.logit_bias: token id(s) [1000, 70000] outside the model's 1,000 "
        f"logits (teacher.{backend}.model {model}/config.json)"]
    within = {**teacher, "sampling": {"logit_bias": {999: 5.0}}}
    assert worker_problems(GenerateConfig(out=str(tmp_path), teacher=within),
                           OutProbe.create(tmp_path)) == []


def test_the_llm_critics_logit_bias_is_checked_under_its_own_name(tmp_path):
    model = _model_dir(tmp_path, '{"vocab_size": 1000}')
    critic = {"backend": "hf", "hf": {"model": str(model)},
              "sampling": {"logit_bias": {4096: 1.0}}}
    config = GenerateConfig(out=str(tmp_path), critics={"backend": "llm", "llm": critic})
    assert worker_problems(config, OutProbe.create(tmp_path)) == [
        f"critics.llm.sampling.logit_bias: token id(s) [4096] outside the model's 1,000 logits "
        f"(critics.llm.hf.model {model}/config.json)"]


@pytest.mark.parametrize("config_json", ['{"text_config": {"vocab_size": 1000}}',
                                         '{"model_type": "x"}', "not json", "[1, 2]"])
def test_the_vocabulary_comes_from_a_text_config_or_is_left_to_the_loader(tmp_path,
                                                                           config_json):
    model = _model_dir(tmp_path, config_json)
    teacher = {"backend": "vllm", "vllm": {"model": str(model)},
               "sampling": {"logit_bias": {1000: 5.0}}}
    problems = worker_problems(GenerateConfig(out=str(tmp_path), teacher=teacher),
                               OutProbe.create(tmp_path))
    assert len(problems) == ("vocab_size" in config_json)


def test_a_model_on_other_nodes_is_left_to_the_loader(tmp_path):
    tokenizer = _model_dir(tmp_path, "{}")  # the chunk worker reads only the tokenizer
    teacher = {"backend": "vllm", "vllm": {"model": "/on/the/gpu/nodes/only",
                                           "tokenizer": str(tokenizer)},
               "sampling": {"logit_bias": {10**6: 5.0}}}
    assert worker_problems(GenerateConfig(out=str(tmp_path), teacher=teacher),
                           OutProbe.create(tmp_path)) == []


def _summary(**fields) -> RunSummary:
    base = {"out": "OUT", "counts": {}, "generated": 0,
            "seconds": 1.0, "complete": False}
    return RunSummary(**{**base, **fields})


def test_a_run_whose_chunks_all_failed_is_not_called_complete():
    text = _summary(failed_chunks=[(0, "boom"), (1, "boom")]).format()
    assert "nothing to do" not in text and "already complete" not in text
    assert "INCOMPLETE, 2 chunk(s) failed" in text and "no chunk was written" in text
    assert "FAILED 2 chunks (0, 1): boom (rerun the same command to retry)" in text
    assert "nothing to do" in _summary(complete=True).format()


def test_failed_chunks_are_listed_once_per_reason_naming_the_first_ten():
    """Before, one line per failed chunk: an engine that cannot start failed all 10,000 chunks
    of a run, and the summary was 10,000 lines of the same reason."""
    failed = [(index, "EngineNotReady: not placed") for index in range(10_000)]
    failed.insert(3, (20_000, "OSError: disk full"))
    lines = _summary(failed_chunks=failed).format().splitlines()
    assert [line for line in lines if line.startswith("FAILED")] == [
        "FAILED 10,000 chunks (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...): EngineNotReady: not placed "
        "(rerun the same command to retry)",
        "FAILED chunk 20000: OSError: disk full (rerun the same command to retry)"]


def test_stage_shares_come_from_the_chunk_records():
    def record(stats):
        return ChunkRecord(0, {"trajectories": ShardInfo("f", 1, 1, "x")}, stats)

    timed = [record({"stage_seconds": {"rollout": 3.0, "rows": 1.0}}),
             record({"stage_seconds": {"rollout": 1.0, "write": 1.0}})]
    assert stage_seconds(timed) == {"rollout": 4.0, "rows": 1.0, "write": 1.0}
    coarse = stage_seconds([record({"seconds_rollout": 1.0, "seconds": 4.0})])
    assert coarse == {"rollout+rows": 1.0, "negatives+critics": 3.0}
    text = _summary(stage_seconds={"rollout": 3.0, "write": 1.0}, generated=1).format()
    assert "chunk CPU time (4.0 worker-s): rollout 75%, write 25%" in text
