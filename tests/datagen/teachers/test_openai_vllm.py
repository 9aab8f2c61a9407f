"""The `openai` teacher against a real vLLM OpenAI-compatible server of the tiny model on
loopback: tokens in / tokens out with exact ids and top-k, the chat endpoint in text mode, and
the chunk pipeline with its request cache."""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq
import pytest

from datagen.chat import DEFAULT_SYSTEM_PROMPT, generation_prompt, system_turn, user_turn
from datagen.pipeline.chunk import ChunkProcessor, plan_chunks
from datagen.config import GenerateConfig
from datagen.teachers import make_teacher
from datagen.teachers.config import TeacherConfig
from datagen.types import Span
from tests.datagen.teachers.helpers import (chatty_bias, check_row_alignment,
                                            check_trajectory_alignment, make_tasks)

pytestmark = pytest.mark.slow
K = 4


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _teacher_config(server, model, tokenizer, token_ids: bool = True, **openai) -> dict:
    return {"backend": "openai", "name": "tiny-vllm-server",
            "openai": {"base_url": server.base_url, "model": str(model), "token_ids": token_ids,
                       "tokenizer": str(model) if token_ids else None, "cache": False,
                       "timeout_s": 60, **openai},
            "sampling": {"max_tokens_per_turn": 24, "temperature": 1.0, "logprobs": K,
                         "logit_bias": chatty_bias(tokenizer)},
            "episode": {"max_turns": 3, "max_total_tokens": 4000}}


def test_tokens_in_tokens_out_episodes_are_exact(vllm_server, tiny_model, tokenizer):
    teacher = make_teacher(TeacherConfig(**_teacher_config(vllm_server, tiny_model, tokenizer)))
    trajectories = teacher.rollout_batch(make_tasks(6, envs=("sql", "fs")))
    for traj in trajectories:
        assert traj.error and not traj.success
        generated = check_trajectory_alignment(tokenizer, traj, K)
        assert generated == traj.meta["completion_tokens"] > 0
        assert traj.meta["prompt_token_mismatches"] == 0, "the server saw exactly our ids"
        assert traj.meta["retokenised_turns"] == 0
    assert sum(t.meta["turns"] for t in trajectories) > len(trajectories)

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    traj = max(trajectories, key=lambda t: t.meta["turns"])
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([traj.tokens.ids])).logits[0]
        reference = torch.log_softmax(logits, -1)
    for position, (ids, values) in enumerate(zip(*traj.tokens.topk_lists())):
        if ids:  # the server's top-k is the model's raw distribution, in every turn
            local = reference[position - 1]
            assert values == pytest.approx(local[ids].tolist(), abs=2e-3)
            assert min(values) >= local.topk(K).values[-1].item() - 2e-3


def test_chat_endpoint_in_text_mode(vllm_server, tiny_model, tokenizer):
    config = _teacher_config(vllm_server, tiny_model, tokenizer, token_ids=False)
    config["episode"]["max_turns"] = 1
    teacher = make_teacher(TeacherConfig(**config))
    tasks = make_tasks(3, envs=("sql",))
    for task, traj in zip(tasks, teacher.rollout_batch(tasks)):
        assert traj.tokens is None and traj.steps and traj.error
        prompt = (system_turn(traj.tools, DEFAULT_SYSTEM_PROMPT) + user_turn(task.instruction)
                  + generation_prompt())
        expected = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        assert traj.meta["prompt_tokens"] == expected, "the server rendered our template"


def test_chunk_pipeline_writes_topk_and_a_resume_is_free(vllm_server, tiny_model, tokenizer,
                                                         tmp_path):
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=4, chunk_size=4,
                            envs=[{"name": "sql"}], progress=False,
                            teacher=_teacher_config(vllm_server, tiny_model, tokenizer,
                                                    cache=True))
    chunk = plan_chunks(config)[0]
    ChunkProcessor(config).process(chunk)
    first = pq.read_table(tmp_path / "out" / "trajectories").to_pylist()
    assert (tmp_path / "out" / "_cache" / "openai_requests.sqlite").exists()
    for row in first:
        meta = orjson.loads(row["teacher_meta"])
        assert row["tokenizer"] == str(tiny_model) and meta["backend"] == "openai"
        generated = check_row_alignment(tokenizer, row["text"], [Span(**s) for s in row["spans"]],
                                        row["input_ids"], row["span_ids"],
                                        row["teacher_topk_ids"], row["teacher_topk_logprobs"], K)
        assert generated == meta["completion_tokens"]

    ChunkProcessor(config).process(chunk)  # a rerun of the chunk, as after a kill
    again = pq.read_table(tmp_path / "out" / "trajectories").to_pylist()
    assert [row["input_ids"] for row in again] == [row["input_ids"] for row in first]
    for row in again:
        meta = orjson.loads(row["teacher_meta"])
        assert meta["cache_hits"] == meta["turns"], "every turn replayed from the cache"


@pytest.mark.parametrize("token_ids", [True, False], ids=["completions-ids", "chat-no-tools"])
def test_critic_completions_through_a_real_vllm_server(vllm_server, tiny_model, tokenizer,
                                                       token_ids):
    from critics.llm_critic import CRITIC_SYSTEM_PROMPT
    from datagen.teachers.completion import BackendCompleter

    teacher = make_teacher(TeacherConfig(**_teacher_config(vllm_server, tiny_model, tokenizer,
                                                           token_ids=token_ids)))
    completer = BackendCompleter(teacher.backend, max_tokens=8,
                                 system_prompt=CRITIC_SYSTEM_PROMPT)
    replies = completer([f"Review tool call {i}." for i in range(4)])
    assert len(replies) == 4 and all(isinstance(reply, str) for reply in replies), replies
