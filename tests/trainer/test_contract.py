"""trainer.contract equals the generation side: span kinds and ids, chat markers, the
columns the trainer reads, how a call is written, and how a rendered conversation splits
into spans (training itself never imports datagen; this test is where the two meet)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from datagen import chat, rows, types
from datagen.pipeline.stages import tables
from datagen.chat import act_text, render_trajectory
from datagen.types import Observation, Step, Task, ToolCall, Trajectory
from tests.datagen.helpers import oracle_trajectories
from trainer import contract


def _as_act(spans):
    """A repair's ERROR span is ACT for the labeller (it cannot see the error in text)."""
    return [{**span, "kind": "ACT" if span["kind"] == "ERROR" else span["kind"]} for span in spans]


def _dicts(spans):
    return [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]


def test_span_kinds_and_ids_are_datagens():
    assert contract.SPAN_KINDS == types.SPAN_KINDS
    assert contract.SPAN_KIND_ID == types.SPAN_KIND_ID
    assert (contract.PROMPT, contract.REASON, contract.ACT, contract.OBS, contract.ERROR) == \
        tuple(types.SPAN_KIND_ID[k] for k in ("PROMPT", "REASON", "ACT", "OBS", "ERROR"))


def test_markers_and_columns_are_datagens():
    assert (contract.IM_START, contract.IM_END) == (chat.IM_START, chat.IM_END)
    assert (contract.TOOL_CALL_OPEN, contract.TOOL_CALL_CLOSE) == (chat.TOOL_CALL_OPEN,
                                                                   chat.TOOL_CALL_CLOSE)
    assert contract.ANSWER_PREFIX == chat.ANSWER_PREFIX
    assert contract.TOOL_RESPONSE_OPEN in chat.observation_turn("x")
    assert contract.TABLES == tuple(t.name for t in (tables.TRAJECTORIES, tables.NEGATIVES,
                                                     tables.REPAIRS, tables.PREFERENCES))
    assert set(contract.TRAJECTORY_COLUMNS) <= set(rows.TRAJECTORY_SCHEMA.names)
    assert contract.TOKEN_COLUMNS == tuple(f.name for f in rows.TOKEN_FIELDS)
    assert set(contract.TOPK_COLUMNS) | {contract.TOKENIZER_COLUMN} <= set(rows.TEACHER_FIELDS)
    assert contract.REPAIR_KEY in rows.REPAIR_SCHEMA.names
    assert set(contract.PREFERENCE_COLUMNS) <= set(rows.PREFERENCE_SCHEMA.names)
    from datagen.pipeline.stages.consistency import CONSISTENCY
    assert contract.CONSISTENCY_TABLE == CONSISTENCY.name
    assert set(contract.CONSISTENCY_COLUMNS) <= set(rows.CONSISTENCY_SCHEMA.names)


@pytest.mark.parametrize("name,arguments", [
    ("run_query", {"sql": "SELECT ünïcode, \"quoted\" FROM x"}),
    ("update", {"id": 7, "fields": {"tags": ["a", "b"], "score": 1.5, "ok": True, "none": None}}),
    ("list_tables", {}),
])
def test_a_call_is_written_as_datagen_writes_it(name, arguments):
    step = Step("reasoning", call=ToolCall(name, arguments))
    assert contract.call_act_text(name, arguments) == act_text(step)


def test_chat_spans_equal_datagens_spans_of_every_rendered_trajectory():
    for traj in oracle_trajectories(60):
        text, spans = render_trajectory(traj)
        assert contract.chat_spans(text) == _dicts(spans), traj.id


def test_chat_spans_equal_the_spans_stored_in_the_shards(pipeline_out):
    """Trajectories and repairs as stored; preference pairs: prompt + chosen is the
    trajectory's text up to that turn, so its spans are the trajectory's, cut there."""
    by_id = {}
    for table in ("trajectories", "repairs"):
        for shard in sorted((pipeline_out / table).glob("part-*.parquet")):
            for row in pq.read_table(shard, columns=["id", "text", "spans"]).to_pylist():
                assert contract.chat_spans(row["text"]) == _as_act(row["spans"]), row["id"]
                by_id[row["id"]] = row
    sources = set()
    for shard in sorted((pipeline_out / "preferences").glob("part-*.parquet")):
        for pair in pq.read_table(shard).to_pylist():
            sources.add(pair["source"])
            if pair["source"] != "negative":
                continue
            text = pair["prompt_text"] + pair["chosen_text"]
            source = by_id[pair["trajectory_id"]]
            assert source["text"].startswith(text)
            cut = [dict(s, end=min(s["end"], len(text))) for s in source["spans"]
                   if s["start"] < len(text)]
            assert contract.chat_spans(text) == cut
    assert sources == set(contract.PREFERENCE_SOURCES)


def _code_chars(text, spans):
    """Characters the split embedding reads in code mode: from `<tool_call>` to the end of
    an ACT span."""
    out = set()
    for span in spans:
        segment = text[span["start"]:span["end"]]
        if span["kind"] == "ACT" and contract.TOOL_CALL_OPEN in segment:
            out.update(range(span["start"] + segment.index(contract.TOOL_CALL_OPEN), span["end"]))
    return out


def test_llm_turns_get_the_same_code_mode_as_datagens_spans():
    """Raw LLM turns (text exactly as generated) may differ by the header's newline
    (PROMPT here, ACT there) but never in what is embedded in code mode."""
    call = ToolCall("lookup", {"q": "x"})
    call_text = f"{contract.TOOL_CALL_OPEN}\n{{\"name\": \"lookup\", \"arguments\": {{\"q\": \"x\"}}}}\n" \
                f"{contract.TOOL_CALL_CLOSE}"
    steps = [Step("", call=call, raw=call_text, observation=Observation("row 1")),
             Step("think", call=call, raw=f"I should look.\n\n{call_text}",
                  observation=Observation("row 2")),
             Step("", raw="no action here", error="unparsable", observation=Observation("Error")),
             Step("", answer="42", raw="Done.\nFinal answer: 42")]
    task = Task(id="t", env="sql", seed=0, instruction="Find it.", gold=[])
    traj = Trajectory(id="x", task=task, tools=[], steps=steps, success=True, reward=1.0,
                      teacher="hf")
    text, spans = render_trajectory(traj)
    ours = contract.chat_spans(text)
    assert _code_chars(text, ours) == _code_chars(text, _dicts(spans))
    assert [s["kind"] for s in ours if s["kind"] in ("REASON", "ACT")] == \
        [s.kind for s in spans if s.kind in ("REASON", "ACT")]


@pytest.mark.parametrize("chunk", [0, 7, 123456])
def test_a_shards_chunk_marker_is_datagens(chunk):
    from datagen.pipeline.shards import ShardStore

    folder, _, shard = ShardStore.shard_file("trajectories", chunk).rpartition("/")
    marker = f"{contract.CHUNK_MARKERS}/{contract.marker_of(shard)}"
    assert ShardStore.marker_file(chunk) == marker


def test_the_trainer_reads_only_shards_of_complete_chunks(tmp_path):
    """A killed chunk leaves a shard without its marker (on a store at its final key): the
    trainer's listing leaves it out, as datagen's resume does; an OUT without markers (made
    by hand) is read whole."""
    import pyarrow as pa

    from datagen.pipeline.shards import ShardStore
    from trainer.shard_files import part_files

    store = ShardStore(tmp_path / "out", ["trajectories"])
    store.claim("fp", {}, overwrite=False)
    store.write_chunk(0, {"trajectories": pa.table({"id": ["a"]})}, {})
    store.storage.write(store.shard_file("trajectories", 1), b"a killed chunk's shard")
    complete = str(store.shard_path("trajectories", 0))
    assert part_files(tmp_path / "out", "trajectories") == [complete]
    store.storage.delete(store.marker_file(0))
    assert len(part_files(tmp_path / "out", "trajectories")) == 2
