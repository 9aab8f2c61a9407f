"""benchmarks/bench_teacher_ratio.py reads a run's turns back from its rows: each turn's exact
prompt ids and generated length must be what the episode loop sent and got, or the bare
replay is not the same work. Real episode loop, real trace and row columns; the backend is a
scripted token backend (no engine)."""

from __future__ import annotations

import asyncio
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen.chat import IM_END
from datagen.envs import make_env
from datagen.rows import render
from datagen.teachers.config import TeacherConfig
from datagen.teachers.episode import EnvLeases, EpisodeRunner, Generation, TurnBackend
from datagen.teachers.trace import teacher_columns
from tests.datagen.teachers.helpers import make_tasks
from tests.conftest import load_script


def _bench():
    if "bench_teacher_ratio" not in sys.modules:  # loaded once: its classes stay the same
        load_script("benchmarks/bench_teacher_ratio.py")
    return sys.modules["bench_teacher_ratio"]


class ScriptedTokens(TurnBackend):
    """Malformed tool calls of varying length (feedback keeps the episode going), the last
    turn of some episodes cut at the token cap; records what each request was."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.tokenizer_name = tokenizer, "tiny"
        self.sent: dict[str, list[tuple[list[int], int]]] = {}

    async def generate(self, request):
        episode, turn = request.key.rsplit(":", 1)
        words = " ".join(["step"] * (1 + (len(episode) + 3 * int(turn)) % 7))
        ids = self.tokenizer.encode(f"{words} <tool_call>{{bad", add_special_tokens=False)
        cut = int(turn) == 2 and sum(map(ord, episode)) % 2 == 0
        ids = ids[:request.max_tokens] if cut else ids + [
            self.tokenizer.convert_tokens_to_ids(IM_END)]
        self.sent.setdefault(episode, []).append((list(request.prompt_ids), len(ids)))
        await asyncio.sleep(0)
        return Generation(text=self.tokenizer.decode(ids), token_ids=ids,
                          topk_ids=[[t, 1] for t in ids], topk_logprobs=[[-0.1, -2.0]] * len(ids),
                          finish_reason="length" if cut else "stop",
                          prompt_tokens=len(request.prompt_ids), completion_tokens=len(ids))


@pytest.fixture
def tokenizer(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


def test_recorded_turns_are_the_prompts_and_lengths_the_episodes_sent(tokenizer, tmp_path):
    backend = ScriptedTokens(tokenizer)
    config = TeacherConfig(backend="oracle", episode={"max_turns": 3,
                                                      "max_concurrent_episodes": 4})
    runner = EpisodeRunner(backend, config, "scripted", EnvLeases(make_env))
    trajectories = asyncio.run(runner.run_batch(make_tasks(6, envs=("sql", "fs"))))
    (ids, _), columns = teacher_columns(trajectories, [render(t) for t in trajectories],
                                        tokenizer, "tiny")
    (tmp_path / "trajectories").mkdir()
    pq.write_table(pa.table({"id": [t.id for t in trajectories], "input_ids": ids,
                             "teacher_topk_ids": columns["teacher_topk_ids"],
                             "teacher_meta": columns["teacher_meta"]}),
                   tmp_path / "trajectories" / "part-0.parquet")

    turns = _bench().recorded_turns(tmp_path)

    expected = [turn for t in trajectories for turn in backend.sent[t.id]]
    assert len(expected) == 18 and any(n < 10 for _, n in expected)  # 3 turns each, mixed
    assert [(t.prompt_ids, t.generated) for t in turns] == expected


def test_a_row_whose_top_k_misses_tokens_is_refused(tmp_path):
    (tmp_path / "trajectories").mkdir()
    pq.write_table(pa.table({"id": ["a"], "input_ids": [[1, 2, 3, 4]],
                             "teacher_topk_ids": [[[], [7], [], [9]]],
                             "teacher_meta": ['{"completion_tokens": 3}']}),
                   tmp_path / "trajectories" / "part-0.parquet")
    with pytest.raises(ValueError, match="2 generated tokens, teacher_meta says 3"):
        _bench().recorded_turns(tmp_path)
    assert [(t.prompt_ids, t.generated) for t in _bench().row_turns(
        [1, 2, 3, 4], [[], [7], [], [9]])] == [([1], 1), ([1, 2, 3], 1)]
