"""LLM critic: prompt rendering and a never-raising reply parser."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from critics.critique import build_request
from critics.inject import inject_error
from critics.llm_critic import LLMCritic, parse_reply, render_prompt
from critics.repair import repair_injection
from datagen.envs import make_env
from datagen.types import Step
from mutators import Rejected
from tests.datagen.helpers import oracle_trajectories


def _request():
    traj = oracle_trajectories(1, envs=("enterprise",))[0]
    env = make_env("enterprise")
    injection = inject_error(traj, env, seed=3, kinds=("type_error",))
    steps = traj.steps[:injection.step] + [Step("", call=injection.wrong_call,
                                                observation=injection.observation)]
    gold = traj.task.gold[injection.step].call
    return traj, env, injection, build_request(traj.task, traj.tools, steps, injection.step,
                                               gold, injection.kind, injection.negative), gold


def test_prompt_shows_task_failed_call_response_and_findings_but_not_the_gold():
    traj, _, injection, request, gold = _request()
    prompt = render_prompt(request)
    assert traj.task.instruction in prompt
    assert injection.observation.content[:60] in prompt
    assert request.errors and request.errors[0].message in prompt
    assert '"name": "%s"' % injection.wrong_call.name in prompt
    assert "<critique>" in prompt and "<tool_call>" in prompt
    assert f"# Failed call (step {injection.step})" in prompt


def test_parse_reply_reads_critique_and_call():
    reply = ('Sure.\n<critique>The id was wrong.</critique>\n<tool_call>{"name": "get_order", '
             '"arguments": {"order_id": "ORD-12345"}}</tool_call>')
    critique = parse_reply(reply)
    assert critique.error is None and critique.text == "The id was wrong."
    assert critique.call.name == "get_order" and critique.call.arguments["order_id"] == "ORD-12345"
    stringly = parse_reply('<critique>x</critique><tool_call>{"name": "a", "arguments": '
                           '"{\\"k\\": 1}"}</tool_call>')
    assert stringly.call.arguments == {"k": 1}


def test_parse_reply_never_raises():
    for reply in ["", "no tags at all", "<critique></critique>", "<critique>ok</critique>",
                  "<critique>ok</critique><tool_call>{not json</tool_call>",
                  "<critique>ok</critique><tool_call>[1, 2]</tool_call>",
                  '<critique>ok</critique><tool_call>{"name": 3}</tool_call>', None, 42]:
        critique = parse_reply(reply)
        assert critique.call is None and critique.error


def test_llm_critic_plugs_into_repair_and_backend_failures_are_data():
    traj, env, injection, request, gold = _request()
    seen = []

    def fake_model(prompts: list[str]) -> list[str]:  # FAKE model: the gold call, tagged
        seen.append(prompts)
        return [f"<critique>The `{request.path}` argument had the wrong type.</critique>"
                f'<tool_call>{{"name": "{gold.name}", "arguments": '
                f'{json.dumps(gold.arguments)}}}</tool_call>' for _ in prompts]

    repair = repair_injection(env, injection, LLMCritic(fake_model), random.Random(0))
    assert not isinstance(repair, Rejected) and repair.traj.success and len(seen) == 1

    def broken(prompts: list[str]) -> list[str]:
        raise TimeoutError("backend down")

    critique = LLMCritic(broken)(request, random.Random(0))
    assert critique.call is None and "TimeoutError" in critique.error


def test_prefetch_asks_once_for_the_batch_and_keeps_per_prompt_failures_apart():
    _, _, _, request, gold = _request()
    other = replace(request, error_step=request.error_step, observation=None)
    calls = []

    def model(prompts: list[str]) -> list:
        calls.append(len(prompts))
        return [ValueError("this one failed"), "<critique>ok</critique>"
                f"<tool_call>{{\"name\": \"{gold.name}\", \"arguments\": {{}}}}</tool_call>"]

    critic = LLMCritic(model)
    critic.prefetch([request, other, request])  # duplicates are asked once
    assert calls == [2]
    first, second = critic(request, random.Random(0)), critic(other, random.Random(0))
    assert calls == [2]  # both answered from the prefetched replies
    assert first.call is None and "ValueError: this one failed" in first.error
    assert second.call is not None and second.call.name == gold.name
    short = LLMCritic(lambda prompts: ["<critique>x</critique>"])
    short.prefetch([request, other])
    assert "returned 1 replies for 2 prompts" in short(request, random.Random(0)).error
