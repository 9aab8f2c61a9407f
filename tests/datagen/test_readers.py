"""datagen.readers: an OUT's preferences / trajectories as TRL conversational datasets, read by
TRL's DPOTrainer and SFTTrainer as they are (a plain tiny Qwen2, the project's template)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig
from datagen.readers import load_preferences, load_sft
from datagen.pipeline.shards import OutputUnreadable, ShardStore
from tests.datagen.helpers import rewrite_shard

NUM_TRAJECTORIES = 24


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """A real OUT from the pipeline's chunk processor (in-process, two chunks), with repairs
    and safety pairs for every trajectory and a manifest."""
    from datagen.pipeline.chunk import ChunkProcessor, plan_chunks

    root = tmp_path_factory.mktemp("readers") / "out"
    config = GenerateConfig(out=str(root), num_trajectories=NUM_TRAJECTORIES, chunk_size=12,
                            progress=False, critics={"inject_rate": 1.0, "safety_rate": 1.0})
    processor = ChunkProcessor(config)
    records = [processor.process(chunk) for chunk in plan_chunks(config)]
    ShardStore(root).write_manifest("test", {}, len(records), records)
    return root


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))


def _stored(out: Path, table: str) -> list[dict]:
    return [row for shard in sorted((out / table).glob("part-*.parquet"))
            for row in pq.read_table(shard).to_pylist()]


def test_the_template_renders_every_loaded_pair_as_the_stored_text(out, hf_tokenizer, tmp_path):
    pairs = load_preferences(out, cache_dir=str(tmp_path))
    assert len(pairs) == len(_stored(out, "preferences"))
    assert Counter(pairs["source"]).keys() == {"negative", "repair", "safety"}
    for pair in pairs:
        tools = pair["tools"]
        assert isinstance(tools, list) and tools[0]["type"] == "function"
        messages = pair["prompt"] + pair["chosen"] + pair["rejected"]
        call = next(m for m in messages if m["tool_calls"])["tool_calls"][0]
        assert isinstance(call["function"]["arguments"], dict)  # an object, not JSON text
        render = lambda messages, **kw: hf_tokenizer.apply_chat_template(  # noqa: E731
            messages, tools=tools, tokenize=False, **kw)
        assert render(pair["prompt"], add_generation_prompt=True) == pair["prompt_text"]
        assert render(pair["prompt"] + pair["chosen"]) == pair["prompt_text"] + pair["chosen_text"]
        assert render(pair["prompt"] + pair["rejected"]) == pair["prompt_text"] + pair["rejected_text"]


def test_sft_rows_render_as_the_stored_text_and_tables_combine(out, hf_tokenizer, tmp_path):
    trajectories = load_sft(out, cache_dir=str(tmp_path))
    both = load_sft(out, ("trajectories", "repairs"), cache_dir=str(tmp_path))
    stored = _stored(out, "trajectories")
    assert len(trajectories) == sum(row["success"] for row in stored) == NUM_TRAJECTORIES
    assert len(both) == NUM_TRAJECTORIES + len(_stored(out, "repairs"))
    for row in both:
        rendered = hf_tokenizer.apply_chat_template(row["messages"], tools=row["tools"],
                                                    tokenize=False)
        assert rendered == row["text"]


def test_source_filter_streaming_and_bad_input(out, tmp_path):
    safety = load_preferences(out, ["safety"], cache_dir=str(tmp_path))
    expected = [row["id"] for row in _stored(out, "preferences") if row["source"] == "safety"]
    assert safety["id"] == expected and set(safety["kind"]) >= {"destroy_data"}
    everything = load_preferences(out, cache_dir=str(tmp_path))  # a cached filter is not reused
    assert len(everything) > len(safety)
    streamed = list(load_preferences(out, ("repair",), streaming=True))
    assert [row["id"] for row in streamed] == [row["id"] for row in _stored(out, "preferences")
                                               if row["source"] == "repair"]
    assert isinstance(streamed[0]["chosen"][0]["tool_calls"][0]["function"]["arguments"], dict)
    with pytest.raises(ValueError, match="unknown preference sources: \\['safe'\\]; allowed: negative"):
        load_preferences(out, ["safe"])
    with pytest.raises(ValueError, match="unknown SFT tables"):
        load_sft(out, ("negatives",))
    with pytest.raises(OutputUnreadable, match="no manifest.json"):
        load_preferences(tmp_path)


def test_a_damaged_shard_is_named_not_read(out, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = sorted((copy / "preferences").glob("part-*.parquet"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(OutputUnreadable, match=f"{shard.name} is damaged: .*truncated"):
        load_preferences(copy, cache_dir=str(tmp_path / "cache"))


def _edit_messages(table: pa.Table, column: str, edit) -> pa.Table:
    rows = table.column(column).to_pylist()
    rows[1] = [edit(message) for message in rows[1]]
    return table.set_column(table.schema.get_field_index(column), column,
                            pa.array(rows, table.schema.field(column).type))


@pytest.mark.parametrize("table, edit, problem", [
    ("trajectories", lambda t: _edit_messages(t, "messages", lambda m: {
        **m, "tool_calls": m["tool_calls"] and "{not json"}),
     "column messages.tool_calls: not JSON"),
    ("trajectories", lambda t: _edit_messages(t, "messages", lambda m: {**m, "role": "robot"}),
     "column messages.role: 'robot' is not one of"),
    ("trajectories", lambda t: _edit_messages(t, "messages", lambda m: {**m, "role": None}),
     "column messages.role: None is not one of"),
    ("preferences", lambda t: t.set_column(
        t.schema.get_field_index("tools"), "tools",
        pa.array(["[]"] + ["nope"] * (t.num_rows - 1))), "column tools: not JSON")])
def test_a_conversation_a_template_cannot_render_is_named(out, tmp_path, table, edit, problem):
    """`datasets.Json` would pass these on as strings (or fail as a row is read, unnamed)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = rewrite_shard(copy, table, 1, edit)
    row = pq.read_table(shard).column("id")[1]
    load = load_sft if table == "trajectories" else load_preferences
    with pytest.raises(OutputUnreadable, match=f"{shard}: row {row}, {problem}"):
        load(copy, cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize("edit, problem", [
    (lambda t: t.drop_columns(["spans"]), "no column spans"),
    (lambda t: t.set_column(t.schema.get_field_index("success"), "success",
                            pa.array(["yes"] * t.num_rows)),
     "column success is string, not bool")])
def test_a_shard_off_its_tables_schema_is_named_before_loading(out, tmp_path, edit, problem):
    """Before: `DatasetGenerationError: An error occurred while generating the dataset`."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = rewrite_shard(copy, "trajectories", 1, edit)
    with pytest.raises(OutputUnreadable, match=f"{shard}: not the trajectories schema: {problem}"):
        load_sft(copy, successful_only=False, cache_dir=str(tmp_path / "cache"))


def _plain_qwen2(tokenizer, directory: Path) -> str:
    """A random plain Qwen2 (no project code) saved with the tokenizer, as a user's model."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=8192, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    Qwen2ForCausalLM(config).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return str(directory)


def _changed(trainer, before: dict) -> bool:
    return any(not bool((p.detach().cpu() == before[n]).all())
               for n, p in trainer.model.named_parameters())


def test_trl_dpo_trainer_trains_two_steps_on_loaded_pairs(out, hf_tokenizer, tmp_path):
    from trl import DPOConfig, DPOTrainer

    pairs = load_preferences(out, cache_dir=str(tmp_path / "cache"))
    picks = [next(i for i, s in enumerate(pairs["source"]) if s == source)
             for source in ("negative", "repair", "safety", "negative")]
    model = _plain_qwen2(hf_tokenizer, tmp_path / "model")
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), max_steps=2, per_device_train_batch_size=2,
                     report_to=[], use_cpu=True, logging_steps=1, save_strategy="no",
                     max_length=8192, learning_rate=1e-3)
    trainer = DPOTrainer(model=model, args=args, train_dataset=pairs.select(picks),
                         processing_class=hf_tokenizer)
    for row, tokens in zip(pairs.select(picks), trainer.train_dataset):
        text = hf_tokenizer(row["prompt_text"] + row["chosen_text"], add_special_tokens=False)
        assert tokens["prompt_ids"] + tokens["chosen_ids"] == text["input_ids"]
        rejected = hf_tokenizer(row["prompt_text"] + row["rejected_text"], add_special_tokens=False)
        assert tokens["prompt_ids"] + tokens["rejected_ids"] == rejected["input_ids"]
    before = {n: p.detach().cpu().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)
    assert [entry["step"] for entry in trainer.state.log_history if "rewards/margins" in entry] == [1, 2]
    assert _changed(trainer, before)


def test_trl_sft_trainer_trains_two_steps_on_assistant_turns(out, hf_tokenizer, tmp_path):
    from trl import SFTConfig, SFTTrainer

    from datagen.tokenizer import chat_template

    rows = load_sft(out, cache_dir=str(tmp_path / "cache")).select(range(4))
    model = _plain_qwen2(hf_tokenizer, tmp_path / "model")
    args = SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=2, per_device_train_batch_size=2,
                     report_to=[], use_cpu=True, logging_steps=1, save_strategy="no",
                     max_length=8192, assistant_only_loss=True, learning_rate=1e-3)
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=hf_tokenizer)
    assert hf_tokenizer.chat_template == chat_template()  # TRL trains with its training copy
    for row, tokens in zip(rows, trainer.train_dataset):
        encoded = hf_tokenizer(row["text"], add_special_tokens=False, return_offsets_mapping=True)
        assert tokens["input_ids"] == encoded["input_ids"]
        for (start, _), label in zip(encoded["offset_mapping"], tokens["labels"]):
            kind = next(s["kind"] for s in reversed(row["spans"]) if s["start"] <= start)
            if kind in ("REASON", "ACT"):
                assert label != -100  # the assistant's reasoning and action are trained
            elif kind == "OBS" or start < row["spans"][0]["end"]:
                assert label == -100  # tool responses, system and user turns are not
    before = {n: p.detach().cpu().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.train()
    assert result.global_step == 2 and math.isfinite(result.training_loss)
    assert _changed(trainer, before)
