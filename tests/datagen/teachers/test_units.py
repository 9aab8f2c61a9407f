"""Small parts of the LLM teachers on their own: config errors, AIMD, micro-batching, the wire
format, the cache key, backoff, vLLM's top-k."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from datagen.config import ConfigError, load_config
from datagen.teachers import make_teacher
from datagen.teachers.aimd import AIMDLimiter
from datagen.teachers.cache import RequestCache, fingerprint
from datagen.teachers.episode import Generation, TurnRequest
from datagen.teachers.microbatch import MicroBatcher
from datagen.teachers.openai_client import backoff_seconds
from datagen.teachers.openai_wire import (MalformedResponse, native_messages, parse_choice,
                                          parse_completion)
from datagen.teachers.vllm_engine import topk_of
from tests.datagen.teachers.helpers import TenTokenIdsTokenizerFake


@pytest.mark.parametrize("overrides, expected", [
    ({"teacher.backend": "hf"}, "teacher: teacher.hf is required when teacher.backend is 'hf'"),
    ({"teacher.backend": "gpt"}, "teacher.backend: unknown teacher backend 'gpt'; registered: "
                                 "'oracle', 'hf', 'openai', 'vllm'"),
    ({"teacher.backend": "oracle", "teacher.vllm.model": "m"},
     "teacher.vllm is set but teacher.backend is 'oracle'"),
    ({"teacher.backend": "openai", "teacher.openai.base_url": "http://x/v1",
      "teacher.openai.model": "m", "teacher.openai.token_ids": True},
     "openai.token_ids needs openai.tokenizer"),
    ({"teacher.backend": "hf", "teacher.hf.model": "m", "teacher.hf.temprature": 1},
     "teacher.hf.temprature: unknown field"),
    ({"teacher.sampling.temperature": -1}, "teacher.sampling.temperature:"),
    ({"teacher.sampling.logprobs": 50}, "teacher.sampling.logprobs:"),
])
def test_teacher_config_errors_name_the_field(overrides, expected):
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert expected in str(error.value)


def test_example_configs_load():
    for name in ("teacher_hf_tiny", "teacher_openai", "teacher_vllm_qwen2_5_32b",
                 "teacher_vllm_tiny_cpu"):
        config = load_config(f"configs/{name}.yaml")
        assert config.teacher.backend in ("hf", "openai", "vllm")


def test_make_teacher_needs_the_backend_section():
    with pytest.raises(ValueError, match="needs its config section"):
        make_teacher("vllm")
    assert make_teacher("oracle").name == "oracle"


def test_aimd_halves_once_per_window_and_grows_additively():
    async def run():
        limiter = AIMDLimiter(initial=8, minimum=1, maximum=20)
        limiter.bind_loop()
        contexts = [limiter.slot() for _ in range(8)]
        entered = [await context.__aenter__() for context in contexts]
        for slot in entered:  # a whole window of 429s
            slot.throttled = True
        for context in contexts:
            await context.__aexit__(None, None, None)
        assert limiter.limit == 4 and limiter.throttles == 8
        for _ in range(40):
            async with limiter.slot() as slot:
                slot.succeeded = True
        assert 4 + 40 / 13 < limiter.limit < 4 + 40 / 4
    asyncio.run(run())


def test_aimd_blocks_beyond_the_limit():
    async def run():
        limiter = AIMDLimiter(initial=2, minimum=1, maximum=2)
        limiter.bind_loop()
        active = []

        async def request(i):
            async with limiter.slot() as slot:
                active.append(limiter.in_flight)
                await asyncio.sleep(0.01)
                slot.succeeded = True
        await asyncio.gather(*(request(i) for i in range(10)))
        return max(active)
    assert asyncio.run(run()) == 2


def test_microbatcher_waits_for_live_episodes_and_caps_batches():
    sizes = []

    def run(requests):
        sizes.append(len(requests))
        return [Generation(text=r.key) for r in requests]

    async def episodes():
        batcher = MicroBatcher(run, max_batch=3)

        async def episode(i):
            batcher.episode_started()
            try:
                for turn in range(2 if i % 2 else 1):
                    gen = await batcher.submit(TurnRequest([], [], [], 8, f"{i}:{turn}"))
                    assert gen.text == f"{i}:{turn}"
            finally:
                batcher.episode_finished()
        await asyncio.gather(*(episode(i) for i in range(7)))
    asyncio.run(episodes())
    assert max(sizes) == 3 and sum(sizes) == 7 + 3 and sizes[0] == 3


def test_parse_completion_keeps_exact_ids_and_top_k():
    body = {"choices": [{"text": "?", "finish_reason": "stop", "logprobs": {
        "tokens": ["token_id:7", "token_id:2"],
        "top_logprobs": [{"token_id:7": -3.0, "token_id:1": -0.5, "token_id:4": -1.0},
                         {"token_id:2": -0.1, "token_id:9": -2.5}]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 2}}
    gen = parse_completion(body, TenTokenIdsTokenizerFake(), k=2)
    assert gen.token_ids == [7, 2] and gen.text == "H"  # the closing <|im_end|> (id 2) is cut
    assert gen.topk_ids == [[1, 4], [2, 9]] and gen.topk_logprobs == [[-0.5, -1.0], [-0.1, -2.5]]
    with pytest.raises(ValueError):
        parse_completion({"choices": [{"logprobs": {"tokens": ["hello"]}}]},
                         TenTokenIdsTokenizerFake(), 2)
    # ids the tokenizer does not have would decode to nothing and break the trainer
    for tokens, top in [(["token_id:10"], []), (["token_id:-3"], []),
                        (["token_id:1"], [{"token_id:99999999999999999999": -0.1}])]:
        with pytest.raises(MalformedResponse, match="outside the vocabulary"):
            parse_completion({"choices": [{"logprobs": {"tokens": tokens, "top_logprobs": top}}]},
                             TenTokenIdsTokenizerFake(), 2)


def test_native_tool_calls_read_and_written():
    body = {"choices": [{"finish_reason": "tool_calls", "message": {
        "content": "Checking.", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "list_tables", "arguments": "{\"schema\": \"main\"}"}}]}}]}
    text = parse_choice(body).text
    assert text == ('Checking.\n<tool_call>\n{"name": "list_tables", "arguments": '
                    '{"schema": "main"}}\n</tool_call>')
    native = native_messages([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                              {"role": "assistant", "content": text},
                              {"role": "tool", "content": "[]"},
                              {"role": "assistant", "content": "<tool_call>{oops</tool_call>"},
                              {"role": "tool", "content": "Error: invalid_json"}])
    assert native[2]["tool_calls"][0]["function"]["arguments"] == '{"schema":"main"}'
    assert native[3] == {"role": "tool", "tool_call_id": native[2]["tool_calls"][0]["id"],
                         "content": "[]"}
    assert native[5] == {"role": "user", "content": "Error: invalid_json"}


def test_cache_key_depends_on_content_and_turn(tmp_path):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    assert fingerprint(body, "a:0") == fingerprint(dict(reversed(body.items())), "a:0")
    assert fingerprint(body, "a:0") != fingerprint(body, "a:1")
    assert fingerprint(body, "a:0") != fingerprint({**body, "temperature": 0.8}, "a:0")
    cache = RequestCache(tmp_path / "c.sqlite")
    cache.put("k", b"{}")
    assert RequestCache(tmp_path / "c.sqlite").get("k") == b"{}" and cache.get("x") is None


def test_backoff_is_jittered_capped_and_honours_retry_after():
    delays = [backoff_seconds(attempt, 0.5, 4.0, None) for attempt in range(10) for _ in range(20)]
    assert all(0 <= d <= 4.0 for d in delays) and len(set(delays)) > 100
    assert backoff_seconds(0, 0.01, 10.0, "3") >= 3.0
    assert backoff_seconds(0, 0.01, 1.0, "30") <= 1.0
    assert backoff_seconds(0, 0.01, 1.0, "Wed, 21 Oct 2015 07:28:00 GMT") <= 0.01


def test_vllm_topk_drops_the_sampled_token_outside_the_top_k():
    position = {5: SimpleNamespace(rank=17, logprob=-9.0), 1: SimpleNamespace(rank=1, logprob=-0.2),
                3: SimpleNamespace(rank=2, logprob=-1.9)}
    assert topk_of(position, 2) == ([1, 3], [-0.2, -1.9])
    assert topk_of(None, 2) == ([], [])
