"""Generation with the modifications on: cached decoding, the code-mode state machine on
real trajectories, the MCH hybrid mode, and the evaluation metrics."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import torch

from tests.trainer.helpers import tiny_model
from datagen.types import Step, Task, ToolCall, Trajectory
from trainer.eval import summarize
from trainer.generation import AgentPolicy, GenerationConfig, Turn
from trainer.model.split_embedding import act_mode_from_spans, act_mode_from_tokens
from trainer.tokens import load_tokenizer, special_ids


def _policy(tokenizer_dir, **config):
    tokenizer = load_tokenizer(str(tokenizer_dir))
    ids = special_ids(tokenizer)
    model = tiny_model(vocab_size=1024, split_embeddings=True, use_landmark=True,
                       landmark_block_size=16, landmark_retrieval_topk=64, use_mch=True,
                       tool_call_start_id=ids["tool_call_start"], im_end_id=ids["im_end"])
    return AgentPolicy(model, tokenizer, GenerationConfig(**config))


def test_state_machine_reproduces_training_code_mode_on_real_trajectories(tokenized_out, trainer_tokenizer):
    ids = special_ids(load_tokenizer(str(trainer_tokenizer)))
    table = pq.read_table(sorted((tokenized_out / "trajectories").glob("*.parquet"))[0]).slice(0, 8)
    for tokens, spans in zip(table.column("input_ids").to_pylist(), table.column("span_ids").to_pylist()):
        training = act_mode_from_spans(torch.tensor([tokens]), torch.tensor([spans]),
                                       ids["tool_call_start"])[0].tolist()
        generation = act_mode_from_tokens(tokens, ids["tool_call_start"], ids["im_end"])
        first_turn = spans.index(1)  # the system prompt quotes <tool_call> as documentation
        assert any(training) and training[first_turn:] == generation[first_turn:]


def test_cached_sampling_matches_greedy_decoding_without_a_cache(trainer_tokenizer):
    policy = _policy(trainer_tokenizer, max_new_tokens=12)
    prompt = torch.randint(10, 1000, (1, 40))
    mode = torch.zeros_like(prompt, dtype=torch.bool)
    (fast,) = policy.sample(prompt, mode, 1, temperature=0.0)
    ids = prompt
    for token in fast:  # greedy, recomputing everything from scratch each step
        with torch.no_grad():
            logits = policy.model(input_ids=ids, act_mode=torch.zeros_like(ids, dtype=torch.bool)).logits
        assert int(logits[0, -1].argmax()) == token
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)


def _turn_ids(policy, text, closed=True):
    """Token ids of an assistant turn as a model would emit them."""
    (ids,), _ = policy.tokenizer.encode([text])
    return ids + [policy.ids["im_end"]] if closed else ids


GOOD_CALL = '\n<tool_call>\n{"name": "run_sql", "arguments": {"query": "SELECT 1"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {
    "name": "run_sql", "description": "run a query",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"], "additionalProperties": False}}}]
PROMPT = ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
          [{"kind": "PROMPT", "start": 0, "end": 54, "step": -1}])


def _scripted(policy, monkeypatch, greedy, candidates, scores=None):
    """The policy's sampler and head replaced by scripted turns and confidences."""
    calls = []

    def sample_scored(ids, mode, count, temperature, max_new=None):
        calls.append(count)
        turns = [greedy] if count == 1 else candidates
        return turns, [[0.0] * len(turn) for turn in turns]

    monkeypatch.setattr(policy, "sample_scored", sample_scored)
    if scores is not None:
        monkeypatch.setattr(policy, "confidence", lambda ids, mode, turns:
                            [scores.get(tuple(t)) for t in turns])
    return calls


def test_hybrid_mode_switches_below_threshold_and_keeps_the_most_trusted_turn(trainer_tokenizer, monkeypatch):
    policy = _policy(trainer_tokenizer, threshold=0.5, num_candidates=3)
    greedy = _turn_ids(policy, "first" + GOOD_CALL)
    candidates = [_turn_ids(policy, "second" + GOOD_CALL), _turn_ids(policy, "third" + GOOD_CALL),
                  _turn_ids(policy, "Final answer: 3")]
    scores = {tuple(greedy): 0.2, tuple(candidates[0]): 0.9, tuple(candidates[1]): 0.6}
    _scripted(policy, monkeypatch, greedy, candidates, scores)
    turn = policy.act(*PROMPT, tools=TOOLS)
    assert turn.switched and turn.trigger == "low_confidence" and turn.confidence == 0.9
    assert turn.ids == candidates[0] and turn.problem is None and turn.slow_seconds > 0
    scores[tuple(greedy)] = 0.7  # confident: no slow path
    turn = policy.act(*PROMPT, tools=TOOLS)
    assert not turn.switched and turn.trigger is None and turn.confidence == 0.7
    assert turn.slow_seconds == 0


def test_hybrid_mode_resamples_truncated_unparsable_and_invalid_turns(trainer_tokenizer, monkeypatch):
    """Broken turns reach the slow path too (the MCH never scores them), and a well-formed
    candidate beats a broken one whatever the head says."""
    policy = _policy(trainer_tokenizer, threshold=0.5, num_candidates=2)
    good = _turn_ids(policy, "ok" + GOOD_CALL)
    broken = {
        "truncated": _turn_ids(policy, "ok" + GOOD_CALL[:30], closed=False),
        "unparsable": _turn_ids(policy, 'ok\n<tool_call>\n{"name": "run_sql", "argu\n</tool_call>'),
        "invalid_call": _turn_ids(policy, GOOD_CALL.replace('"SELECT 1"', "7")),
    }
    for trigger, greedy in broken.items():
        calls = _scripted(policy, monkeypatch, greedy, [broken["unparsable"], good],
                          {tuple(good): 0.1})
        turn = policy.act(*PROMPT, tools=TOOLS)
        assert calls == [1, 2] and turn.switched and turn.trigger == trigger
        assert turn.ids == good and turn.problem is None
    # nothing better among the candidates: the greedy turn stays, its problem recorded
    _scripted(policy, monkeypatch, broken["truncated"], [broken["unparsable"]] * 2, {})
    turn = policy.act(*PROMPT, tools=TOOLS)
    assert turn.ids == broken["truncated"] and turn.problem == "truncated"
    # hybrid off: no slow path for a broken turn either
    policy = _policy(trainer_tokenizer, hybrid=False)
    calls = _scripted(policy, monkeypatch, broken["truncated"], [good, good])
    turn = policy.act(*PROMPT, tools=TOOLS)
    assert calls == [1] and not turn.switched and turn.problem == "truncated"


def test_a_real_model_cut_off_by_its_budget_switches_on_truncation(trainer_tokenizer):
    """A random model within 4 tokens never closes its turn: every turn is truncated, goes
    down the slow path, and the episode metrics count it under that trigger."""
    policy = _policy(trainer_tokenizer, max_new_tokens=4, num_candidates=2)
    turns = [policy.act(*PROMPT, tools=TOOLS) for _ in range(2)]
    assert all(t.switched and t.trigger == "truncated" and t.slow_seconds > 0 for t in turns)
    assert all(len(t.ids) == 4 and t.problem == "truncated" for t in turns)
    hybrid = summarize([], turns)["hybrid"]
    assert hybrid["switch_rate"] == 1.0 and hybrid["by_trigger"]["truncated"]["switches"] == 2
    assert hybrid["by_trigger"]["truncated"]["well_formed_after"] == 0.0


def test_confidence_reads_the_mch_at_the_end_of_the_call(trainer_tokenizer):
    policy = _policy(trainer_tokenizer)
    start, end = policy.ids["tool_call_start"], policy.ids["im_end"]
    prompt = torch.randint(10, 1000, (1, 30))
    mode = torch.zeros_like(prompt, dtype=torch.bool)
    scores = policy.confidence(prompt, mode, [[20, start, 21, 22, end], [23, 24, end], [start, 25]])
    assert 0 < scores[0] < 1 and scores[1] is None and scores[2] is None


def _trajectory(env, steps, success, error=None):
    task = Task(id=f"t-{env}-{len(steps)}", env=env, seed=0, instruction="x", gold=[])
    return Trajectory(id=task.id, task=task, tools=[], steps=steps, success=success,
                      reward=float(success), teacher="eval", error=error)


CALL = '<tool_call>{"name": "q", "arguments": {}}</tool_call>'


def test_evaluation_metrics_from_trajectories():
    ok = Step("r", call=ToolCall("q", {}), raw=CALL)
    bad_schema = Step("r", raw=CALL, error="invalid_arguments: arguments.limit: expected integer")
    cut = Step("r", raw='<tool_call>{"na', error="truncated: the turn hit the 24-token limit")
    answer = Step("r", answer="42", raw="Final answer: 42")
    trajectories = [_trajectory("sql", [ok, bad_schema, ok, answer], True),
                    _trajectory("fs", [cut], False, error="turn 0: truncated: ..."),
                    _trajectory("fs", [answer], False, error="wrong_answer: rejected")]
    turns = [Turn("t", confidence=0.3, switched=True, seconds=2.0, slow_seconds=1.0,
                  trigger="low_confidence"),
             Turn("t", confidence=None, switched=False, seconds=1.0, slow_seconds=0.0),
             Turn("t", confidence=None, switched=True, seconds=3.0, slow_seconds=2.0,
                  trigger="truncated", problem="truncated")]
    summary = summarize(trajectories, turns)
    assert summary["episodes"] == 3 and np.isclose(summary["success_rate"], 1 / 3)
    assert summary["tool_calls"] == 4 and summary["syntax_error_rate"] == 0.5
    assert summary["mean_steps"] == 2.0
    assert summary["failures"] == {"invalid_arguments": 1, "truncated": 1, "wrong_answer": 1}
    assert summary["per_env"] == {"sql": {"episodes": 1, "successes": 1},
                                  "fs": {"episodes": 2, "successes": 0}}
    hybrid = summary["hybrid"]
    assert hybrid["mch_scored_turns"] == 1 and hybrid["mch_switch_rate"] == 1.0
    assert np.isclose(hybrid["switch_rate"], 2 / 3)
    assert hybrid["by_trigger"] == {
        "low_confidence": {"switches": 1, "rate": 1 / 3, "well_formed_after": 1.0,
                           "slow_seconds_mean": 1.0},
        "truncated": {"switches": 1, "rate": 1 / 3, "well_formed_after": 0.0,
                      "slow_seconds_mean": 2.0}}
    assert hybrid["latency_overhead"] == 1.0  # slow paths 3 s over fast paths 3 s


def test_policy_and_batched_decoders_play_the_same_episodes_on_a_plain_checkpoint(
        trainer_tokenizer, tmp_path):
    """With every modification off, AgentPolicy's turns through datagen's episode loop are
    datagen's own batched HF decoding, token for token (greedy)."""
    from trainer.eval import rollout
    from trainer.heldout import heldout_tasks
    from trainer.tokens import TextTokenizer

    tiny_model(vocab_size=1024).save_pretrained(tmp_path)
    TextTokenizer(trainer_tokenizer).save(tmp_path)
    tasks = heldout_tasks(["sql", "fs"], 3).tasks
    options = dict(max_steps=2, generation=GenerationConfig(max_new_tokens=16, hybrid=False),
                   on_invalid_turn="feedback", max_batch_size=1)
    policy, turns = rollout(str(tmp_path), tasks, decoder="policy", **options)
    batched, _ = rollout(str(tmp_path), tasks, decoder="batched", **options)
    assert len(turns) == sum(len(t.steps) for t in policy) >= 3
    assert [t.tokens.ids for t in policy] == [t.tokens.ids for t in batched]
    assert [[s.raw for s in t.steps] for t in policy] == [[s.raw for s in t.steps] for t in batched]
    assert all(t.error for t in policy)  # a random model does not solve tasks: reasons recorded
