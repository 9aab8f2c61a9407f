"""A checkpoint that cannot be loaded is refused in one line before any tensor is allocated
(`trainer.checkpoint_check`): `trainer eval`, `fit`'s `model.init_from`, the loop's round 0."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.trainer.helpers import tiny_model
from trainer.__main__ import main
from trainer.checkpoint_check import checkpoint_problem
from trainer.fit import checkpoint_dir


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    directory = tmp_path_factory.mktemp("checkpoint") / "good"
    tiny_model(use_mch=True).save_pretrained(directory)
    return directory


def _damaged(good, tmp_path, **config_changes):
    directory = tmp_path / "damaged"
    shutil.copytree(good, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **config_changes}))
    return directory


def test_a_saved_checkpoint_and_a_plain_qwen2_one_pass(good, tmp_path):
    assert checkpoint_problem(good) is None
    plain = tmp_path / "plain"  # the modifications off, no MCH weights: from_pretrained adds them
    tiny_model().save_pretrained(plain)
    config = json.loads((plain / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({**config, "use_mch": True}))
    assert checkpoint_problem(plain) is None


@pytest.mark.parametrize("damage,expected", [
    ({"hidden_size": 128}, "weights do not match config.json: model.embed_tokens.weight is "
                           "[320, 64] in the weights, [320, 128] by the config"),
    ({"hidden_size": 65536, "intermediate_size": 262144, "num_hidden_layers": 64,
      "layer_types": ["full_attention"] * 64}, "GiB in float32, more than this machine's"),
    ({"num_hidden_layers": 10**9, "layer_types": None}, "num_hidden_layers 1000000000 is not in"),
    ({"num_hidden_layers": 64}, "must be equal to the number of `layer_types` (2)"),
])
def test_a_config_that_does_not_fit_its_weights_or_the_machine(good, tmp_path, damage, expected):
    problem = checkpoint_problem(_damaged(good, tmp_path, **damage))
    assert problem is not None and expected in problem, problem


def test_unreadable_files(good, tmp_path):
    directory = _damaged(good, tmp_path)
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert checkpoint_problem(directory).startswith("weights unreadable: ")
    weights.unlink()
    assert "no model.safetensors" in checkpoint_problem(directory)
    (directory / "config.json").write_text('{"architectures": [')
    assert checkpoint_problem(directory).startswith("config.json: JSONDecodeError")
    (directory / "config.json").unlink()
    (directory / "config.json").symlink_to("/dev/zero")  # read bounded, not forever
    assert "not a regular file" in checkpoint_problem(directory)


def test_commands_refuse_it_in_one_line_naming_the_field(good, tmp_path, capsys):
    damaged = _damaged(good, tmp_path, hidden_size=128)
    assert main(["eval", "--checkpoint", str(damaged), "--num-tasks", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trainer eval: checkpoint {damaged}: weights do not match") \
        and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match=r"^model.init_from: checkpoint .*weights do not match"):
        checkpoint_dir(str(damaged), "model.init_from")
    # eval plays with the checkpoint's own tokenizer: none beside it was a tokenizers traceback
    assert main(["eval", "--checkpoint", str(good), "--num-tasks", "1"]) == 2
    assert capsys.readouterr().err.strip() == (f"trainer eval: checkpoint {good}: tokenizer "
                                               f"{good} has no tokenizer.json (build one: "
                                               "scripts/build_tokenizer.py)")


def test_loaded_weights_holding_nan_or_inf_are_named_with_their_file(good, tmp_path):
    """`non_finite_weight` (the training worker's check after loading, trainer.student): the
    first tensor holding nan or inf, with the shard file that stores it; finite weights pass,
    as do weights whose sum leaves float32's range (the sum is only the quick screen)."""
    import torch

    from trainer.checkpoint_check import non_finite_weight
    from trainer.model import AgentQwen2ForCausalLM

    assert non_finite_weight(AgentQwen2ForCausalLM.from_pretrained(good), good) is None
    model = tiny_model(use_mch=True)
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)  # finite, its sum is inf
        model.model.layers[1].self_attn.o_proj.weight[2, :2] = torch.tensor([float("inf"),
                                                                              float("nan")])
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.1.self_attn.o_proj.weight"
    assert len(set(index.values())) > 2
    assert non_finite_weight(AgentQwen2ForCausalLM.from_pretrained(sharded), sharded) == (
        f"{sharded / index[name]}: tensor {name} holds 2 nan or inf values (of 4,096, in "
        f"float32)")
    with torch.no_grad():
        model.model.layers[1].self_attn.o_proj.weight[2, :2] = 0.0
    assert non_finite_weight(model, sharded) is None  # 3e38 * 64 sums to inf, is finite


def test_a_frozen_teacher_holding_nan_is_refused_naming_its_field(tmp_path):
    """The online teacher (loss.teacher_model) is loaded by `load_frozen`: before, nan weights
    gave nan targets and the fit "diverged" at step 1 with advice to lower optim.lr."""
    import torch

    from trainer.checkpoint_check import CheckpointError
    from trainer.fit import lasting_failure
    from trainer.student import load_frozen

    model = tiny_model()
    with torch.no_grad():
        model.model.norm.weight[0] = float("inf")
    model.save_pretrained(tmp_path / "teacher")
    with pytest.raises(CheckpointError) as refused:
        load_frozen(str(tmp_path / "teacher"), "float32", torch.device("cpu"),
                    field="loss.teacher_model")
    assert str(refused.value) == (
        f"loss.teacher_model: {tmp_path / 'teacher' / 'model.safetensors'}: tensor "
        f"model.norm.weight holds 1 nan or inf values (of {model.model.norm.weight.numel()}, "
        f"in float32); it must hold finite weights")
    assert lasting_failure(refused.value) == "bad checkpoint"


@pytest.mark.parametrize("index,expected", [
    ("[]", "found list"), ("null", "found NoneType"),
    ('{"weight_map": ["model.safetensors"]}', "found list"),
    ('{"weight_map": {"a": 3}}', "weight_map['a'] is not a file name"),
])
def test_a_bent_weights_index_is_one_line_not_a_traceback(good, tmp_path, index, expected):
    directory = _damaged(good, tmp_path)
    (directory / "model.safetensors.index.json").write_text(index)
    problem = checkpoint_problem(directory)
    assert problem.startswith("weights unreadable: ValueError: model.safetensors.index.json")
    assert expected in problem


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_weights_that_are_not_a_regular_file_are_refused_without_opening(good, tmp_path, kind):
    """safe_open on a FIFO waited for a writer forever."""
    directory = _damaged(good, tmp_path)
    weights = directory / "model.safetensors"
    weights.unlink()
    os.mkfifo(weights) if kind == "fifo" else weights.mkdir()
    assert "model.safetensors is not a regular file" in checkpoint_problem(directory)


@pytest.mark.timeout(60)
def test_a_tokenizer_config_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    from tokenizers import Tokenizer, models

    from trainer.tokens import TextTokenizer, tokenizer_problem

    Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")).save(
        str(tmp_path / "tokenizer.json"))
    os.mkfifo(tmp_path / "tokenizer_config.json")
    with pytest.raises(OSError, match="not a regular file"):
        TextTokenizer(tmp_path)
    assert "not a regular file" in tokenizer_problem(tmp_path)
