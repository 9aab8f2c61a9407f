"""Step-level metrics: gold trajectories located in tokens, metrics with known answers from a
scripted fake scorer, and the checkpoint scorer equal to plain full forwards and to the
policy's own greedy decoding."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
import torch

from datagen.chat import parse_assistant, render_call
from datagen.types import ToolCall
from mutators import KINDS, validate
from tests.trainer.helpers import tiny_model
from trainer.heldout import heldout_tasks
from trainer.step_eval import (ACT, REASON, CallStep, ExampleScores, GeneratedTurn, GoldExample,
                               auroc, copy_outcomes, gold_examples, occurs_in, same_json,
                               step_metrics)
from trainer.tokens import load_tokenizer, special_ids


@pytest.fixture(scope="module")
def tokenizer(trainer_tokenizer):
    return load_tokenizer(str(trainer_tokenizer))


@pytest.fixture(scope="module")
def examples(tokenizer):
    tasks = heldout_tasks(["sql", "fs"], 4).tasks
    built, skipped = gold_examples(tasks, tokenizer, with_negatives=True)
    assert len(built) == 4 and not skipped
    return built


def test_gold_steps_are_located_where_the_turns_start_and_the_calls_end(examples, tokenizer):
    for example in examples:
        assert example.calls and example.negatives
        for call in example.calls:
            prompt = tokenizer.decode(example.ids[:call.prompt_len])
            assert prompt.endswith("<|im_start|>assistant\n")
            turn = tokenizer.decode(example.ids[call.prompt_len:call.score_at + 1])
            assert turn.endswith("</tool_call><|im_end|>\n") and example.span_ids[call.score_at] == ACT
            parsed = parse_assistant(turn)
            assert parsed.call.as_dict() == call.call.as_dict()
            assert tokenizer.decode(example.ids[call.act_start:call.score_at + 1]).startswith("\n<tool_call>")
        for negative in example.negatives:
            wrong = parse_assistant(tokenizer.decode(negative.act_ids)).call
            assert negative.kind in KINDS
            assert wrong.as_dict() != example.calls[negative.call_index].call.as_dict()


def test_auroc_and_typed_json_equality():
    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0 and auroc([0.1], [0.9, 0.8]) == 0.0
    assert auroc([0.5, 0.7], [0.5, 0.1]) == 0.875 and auroc([0.5], []) is None
    assert same_json({"a": [1, 2.0]}, {"a": [1.0, 2]}) and not same_json({"a": 1}, {"a": True})
    assert not same_json({"a": "1"}, {"a": 1}) and not same_json({"a": 1}, {"a": 1, "b": 2})


def test_values_occur_verbatim_numbers_not_inside_longer_numbers():
    context = 'Delete /tmp/scratch-417 (not 1.25); {"note":"say \\"hi\\"","n":-3}. Rows: 25.'
    assert occurs_in("/tmp/scratch-417", context) and occurs_in('say "hi"', context)
    assert occurs_in(417, context) and occurs_in(25, context) and occurs_in(-3, context)
    assert not occurs_in(41, context) and not occurs_in(1, context) and not occurs_in(5, context)
    assert not occurs_in(2.5, context) and not occurs_in(25.0, context)  # JSON text "25.0"
    assert not occurs_in("no", context) and not occurs_in(True, context)  # not copyable
    assert not occurs_in("/tmp/scratch-320", context)


def test_copy_rate_and_its_misses_on_a_hand_built_example():
    """Three generated turns for one gold call with five copyable leaves (2 numbers, 3 texts;
    one only JSON-escaped in the context); a short string, a boolean and values that appear
    only after the turn are not copyable."""
    from datagen.types import ToolCall

    context = ('<|im_start|>user\nDelete /tmp/scratch-417 from orders, limit 25; /tmp/scratch-320 '
               'stays.<|im_end|>\n<|im_start|>user\n<tool_response>\n'
               '{"id":482,"msg":"say \\"hi\\""}\n</tool_response><|im_end|>\n<|im_start|>assistant\n')
    gold = ToolCall("delete", {"path": "/tmp/scratch-417", "limit": 25, "mode": "rm", "force": True,
                               "filters": {"id": 482, "tags": ["orders"], "note": "later text"},
                               "message": 'say "hi"'})
    later = "I will call it.\n" + render_call(gold) + "<|im_end|>\nlater text"
    turns = [  # (generated arguments or None: a cut-off turn)
        {"path": "/tmp/scratch-320", "limit": 25, "filters": {"id": 999}, "message": 'say "hi"'},
        None,
        {"path": "/tmp/scratch-4", "limit": 2, "filters": {"id": 482, "tags": ["orders"]},
         "message": "say hi"}]
    calls = [CallStep(i, 0, 0, 0, gold, len(context)) for i in range(3)]
    example = GoldExample("fs", "t", [], [0], np.zeros(1, dtype=np.int64), calls,
                          text=context + later)
    generated = [GeneratedTurn("cut", False) if args is None else
                 GeneratedTurn("Go.\n" + render_call(ToolCall("delete", args)), True)
                 for args in turns]
    scores = ExampleScores(np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool), generated)
    metrics = step_metrics([example], [scores])
    assert metrics["copyable_arguments"] == 15 and metrics["copyable_numeric"] == 6
    assert metrics["copy_rate"] == pytest.approx(4 / 15)
    assert metrics["copy_rate_numeric"] == pytest.approx(2 / 6)  # limit in turn 0, id in turn 2
    assert metrics["copy_rate_text"] == pytest.approx(2 / 9)     # message in 0, tags in 2
    # turn 0: the other scratch path of the request (1), id 999 invented, tags missing; turn 1:
    # 5 unparsed; turn 2: a cut-off path, 2 (not in 25) and "say hi" invented
    assert metrics["copy_misses"] == {"count": 11, "other_context_value": pytest.approx(1 / 11),
                                      "invented": pytest.approx(4 / 11),
                                      "missing_key": pytest.approx(1 / 11),
                                      "unparsed": pytest.approx(5 / 11)}
    assert metrics["per_env"]["fs"]["copy_rate"] == metrics["copy_rate"]


class FakeStepScorer:
    """Stands in for a model: log-probability 1/2 for every REASON token and 1/4 for every
    ACT token, every other ACT token its argmax, and at the gold call steps, in turn: the
    gold call, the gold call with a hallucinated key, an unknown tool, the gold call cut off,
    and the gold call after other reasoning. The MCH trusts gold calls (0.9), distrusts type
    errors and hallucinated keys (0.2) and is fooled by logical errors (0.95)."""

    MODES = ("gold", "extra_key", "unknown_tool", "cut_off", "other_reasoning")

    def __init__(self) -> None:
        self.modes: list[str] = []

    def turn(self, call: ToolCall) -> GeneratedTurn:
        mode = self.MODES[len(self.modes) % len(self.MODES)]
        self.modes.append(mode)
        if mode == "extra_key":
            call = ToolCall(call.name, {**call.arguments, "verbose": True})
        elif mode == "unknown_tool":
            call = ToolCall("no_such_tool", call.arguments)
        text = ("Let me think differently." if mode == "other_reasoning" else "I will call it.")
        text += "\n" + render_call(call)
        return GeneratedTurn(text[:20] if mode == "cut_off" else text, mode != "cut_off")

    def score(self, examples):
        out = []
        for example in examples:
            targets = example.span_ids[1:]
            n_reason, n_act = int((targets == REASON).sum()), int((targets == ACT).sum())
            out.append(ExampleScores(
                reason_logprobs=np.full(n_reason, math.log(0.5)),
                act_logprobs=np.full(n_act, math.log(0.25)), act_hits=np.arange(n_act) % 2 == 0,
                turns=[self.turn(call.call) for call in example.calls],
                gold_confidence=[0.9] * len(example.calls),
                negative_confidence=[0.95 if n.kind == "logical_error" else 0.2
                                     for n in example.negatives]))
        return out


def test_step_metrics_have_the_known_answers_of_a_scripted_fake_model(examples):
    scorer = FakeStepScorer()
    scores = scorer.score(examples)
    for example in examples:  # the premise of "extra_key": the schemas forbid unknown keys
        for call in (c.call for c in example.calls):
            tool = next(t for t in example.tools if t["function"]["name"] == call.name)
            assert validate({"name": call.name, "arguments": {**call.arguments, "verbose": 1}}, tool)
    metrics = step_metrics(examples, scores)
    modes, n = scorer.modes, len(scorer.modes)
    assert metrics["call_steps"] == n == sum(len(e.calls) for e in examples)
    assert metrics["next_call_exact_match"] == pytest.approx(
        sum(m in ("gold", "other_reasoning") for m in modes) / n)
    assert metrics["right_tool_rate"] == pytest.approx(
        sum(m in ("gold", "extra_key", "other_reasoning") for m in modes) / n)
    assert metrics["schema_valid_rate"] == metrics["next_call_exact_match"]
    assert metrics["closed_turn_rate"] == pytest.approx(1 - modes.count("cut_off") / n)
    assert metrics["reason_ce"] == pytest.approx(math.log(2))
    assert metrics["act_ce"] == pytest.approx(math.log(4))
    act_tokens = metrics["act_tokens"]
    assert metrics["act_token_accuracy"] == pytest.approx(
        sum((n_act + 1) // 2 for n_act in (len(s.act_logprobs) for s in scores)) / act_tokens)
    assert set(metrics["per_env"]) == {"sql", "fs"}
    assert sum(env["call_steps"] for env in metrics["per_env"].values()) == n
    mch = metrics["mch"]
    kinds = [neg.kind for e in examples for neg in e.negatives]
    assert mch["gold_steps"] == n and mch["negatives"] == len(kinds)
    assert mch["per_kind"]["logical_error"]["auroc"] == 0.0
    assert mch["per_kind"]["type_error"]["auroc"] == 1.0
    assert mch["auroc"] == pytest.approx(1 - kinds.count("logical_error") / len(kinds))
    # every parsed turn keeps the gold arguments (extra key and unknown tool too): only the
    # cut-off turns miss, as unparsed
    copyable = [len(copy_outcomes(c.call, c.call, e.text[:c.context_chars]))
                for e in examples for c in e.calls]
    missed = sum(n for n, mode in zip(copyable, modes) if mode == "cut_off")
    assert metrics["copyable_arguments"] == sum(copyable) > missed > 0
    assert metrics["copy_rate"] == pytest.approx(1 - missed / sum(copyable))
    assert metrics["copy_misses"] == {"count": missed, "other_context_value": 0.0,
                                      "invented": 0.0, "missing_key": 0.0, "unparsed": 1.0}


def _full_forward(model, ids, spans, mch_at=None):
    positions = torch.tensor([mch_at]) if mch_at is not None else None
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), mch_positions=positions,
                     span_ids=torch.from_numpy(np.asarray(spans, dtype=np.int64))[None])


@pytest.mark.parametrize("landmark", [False, True])
def test_checkpoint_scorer_equals_full_forwards_and_the_policys_greedy_turns(
        examples, tokenizer, landmark):
    """One batched forward + cache cuts give what separate full forwards give (log-probs,
    MCH on gold calls and on negatives tokenised as training tokenises them) and the turns
    AgentPolicy decodes greedily from each gold prompt (float64 against near-ties; landmark
    decoding opens 2 blocks of ~60, so the scorer must decode as the policy does)."""
    from datagen.chat import render_trajectory
    from datagen.teachers import EnvPool, OracleTeacher
    from trainer.generation import AgentPolicy, GenerationConfig
    from trainer.model.split_embedding import act_mode_from_spans
    from trainer.negatives import negative_example
    from trainer.step_scorer import TorchStepScorer
    from trainer.tokens import tokenize_with_spans, tool_call_step_ends

    ids = special_ids(tokenizer)
    model = tiny_model(vocab_size=1024, split_embeddings=True, use_landmark=landmark,
                       landmark_block_size=32, landmark_retrieval_topk=2, use_mch=True,
                       initializer_range=0.5,  # random weights that read the context
                       tool_call_start_id=ids["tool_call_start"], im_end_id=ids["im_end"]).double()
    chosen = examples[:2]  # different lengths: the batch is padded
    # landmark attention computes its softmax in fp32; everything else is float64
    close = dict(rtol=1e-5, atol=1e-6) if landmark else dict(rtol=0, atol=1e-9)
    scores = TorchStepScorer(model, tokenizer, max_new_tokens=4, max_rows=2).score(chosen)
    policy = AgentPolicy(model, tokenizer, GenerationConfig(hybrid=False))
    pool, tasks = EnvPool(), {t.id: t for t in heldout_tasks(["sql", "fs"], 4).tasks}
    for example, score in zip(chosen, scores):
        out = _full_forward(model, example.ids, example.span_ids,
                            [call.score_at for call in example.calls])
        logprobs = torch.log_softmax(out.logits[0, :-1], -1)
        target = logprobs.gather(-1, torch.tensor(example.ids[1:])[:, None])[:, 0].numpy()
        kinds = example.span_ids[1:]
        np.testing.assert_allclose(score.reason_logprobs, target[kinds == REASON], **close)
        np.testing.assert_allclose(score.act_logprobs, target[kinds == ACT], **close)
        np.testing.assert_allclose(score.gold_confidence, torch.sigmoid(out.mch_logits[0]).numpy(),
                                   **close)
        for call, turn in zip(example.calls, score.turns):
            prompt = torch.tensor([example.ids[:call.prompt_len]])
            spans = torch.from_numpy(example.span_ids[:call.prompt_len].astype(np.int64))[None]
            mode = act_mode_from_spans(prompt, spans, ids["tool_call_start"])
            (greedy,) = policy.sample(prompt, mode, 1, 0.0, 4)
            closed = greedy[-1] == ids["im_end"]
            assert turn.closed == closed
            assert turn.text == tokenizer.decode(greedy[:-1] if closed else greedy)
        text, spans = render_trajectory(OracleTeacher().safe_rollout(tasks[example.task_id], pool))
        spans = [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]
        checked = set()
        for negative, confidence in zip(example.negatives, score.negative_confidence):
            if negative.call_index in checked:
                continue  # one full forward per step keeps the test short
            checked.add(negative.call_index)
            call = example.calls[negative.call_index]
            wrong = orjson.dumps(parse_assistant(tokenizer.decode(negative.act_ids)).call.as_dict())
            neg_text, neg_spans = negative_example(text, spans, call.step, wrong.decode())
            (neg_ids,), (neg_labels,) = tokenize_with_spans(tokenizer, [neg_text], [neg_spans])
            assert neg_ids == example.ids[:call.act_start] + negative.act_ids
            at = tool_call_step_ends(np.asarray(neg_ids), neg_labels, ids["tool_call_start"])[-1]
            full = _full_forward(model, neg_ids, neg_labels, [at]).mch_logits
            np.testing.assert_allclose(confidence, float(torch.sigmoid(full[0, 0])), **close)
        assert len(checked) == len(example.calls)


def test_batched_decode_drops_finished_rows_and_matches_one_job_at_a_time(examples, tokenizer):
    """Rows leave the decode batch when they close or reach their own budget: every job's
    greedy turn equals the one it gets decoded alone, with budgets of 3, 9 and 6 tokens and a
    job that closes early (the end-of-turn id set to a token that job generates)."""
    from trainer.step_scorer import TorchStepScorer

    ids = special_ids(tokenizer)
    model = tiny_model(vocab_size=1024, split_embeddings=True, initializer_range=0.5,
                       tool_call_start_id=ids["tool_call_start"], im_end_id=ids["im_end"]).double()
    chosen = examples[:2]
    width = max(len(e.ids) for e in chosen)
    batch = torch.full((2, width), ids["pad"], dtype=torch.long)
    spans = torch.full_like(batch, -1)
    for row, example in enumerate(chosen):
        batch[row, :len(example.ids)] = torch.tensor(example.ids)
        spans[row, :len(example.ids)] = torch.from_numpy(example.span_ids.astype(np.int64))
    with torch.no_grad():
        out = model(input_ids=batch, span_ids=spans, use_cache=True, return_hidden=True,
                    logits_to_keep=1)
    jobs = [(0, chosen[0].calls[0].prompt_len, 3), (0, chosen[0].calls[-1].prompt_len, 9),
            (1, chosen[1].calls[1].prompt_len, 6)]
    scorer = TorchStepScorer(model, tokenizer)

    def alone() -> list[list[int]]:
        with torch.no_grad():
            return [scorer._decode(out.hidden, out.past_key_values, [job])[0] for job in jobs]

    scorer.ids = {**scorer.ids, "im_end": alone()[1][3]}  # job 1 now ends at its 4th token
    reference = alone()
    assert [len(turn) for turn in reference] == [3, 4, 6]
    with torch.no_grad():
        assert scorer._decode(out.hidden, out.past_key_values, jobs) == reference


def test_step_batches_bound_padding():
    """Trajectories of very different lengths go to different forward batches (padding
    costs a full forward per position); similar ones share one."""
    from types import SimpleNamespace

    from trainer.step_scorer import TorchStepScorer

    lengths = [4295, 1510, 2433, 1629, 4144, 2446]
    fake = [SimpleNamespace(ids=[0] * n) for n in lengths]
    scorer = TorchStepScorer.__new__(TorchStepScorer)
    scorer.batch_tokens, scorer.max_rows, scorer.max_padding = 32_768, 8, 0.25
    assert [[lengths[i] for i in b] for b in scorer._batches(fake)] == [
        [1510, 1629], [2433, 2446], [4144, 4295]]
    scorer.max_padding = 1.0
    assert [len(b) for b in scorer._batches(fake)] == [6]
    scorer.max_rows = 4
    assert [len(b) for b in scorer._batches(fake)] == [4, 2]


def test_decode_attention_reads_grouped_kv_heads_in_place_with_the_same_result(monkeypatch):
    """With a padding mask Transformers copies every K/V head group (`repeat_kv`) before sdpa;
    inside `grouped_query_sdpa_on_cpu` it does not, and the logits are the same."""
    from transformers.integrations import sdpa_attention

    from trainer.step_scorer import grouped_query_sdpa_on_cpu

    model = tiny_model().double()  # 4 query heads over 2 K/V heads
    torch.manual_seed(0)
    ids = torch.randint(0, 320, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # a left-padded row, as in the decode cache
    copies, original, repeat = [], sdpa_attention.use_gqa_in_sdpa, sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda h, n: copies.append(n) or repeat(h, n))
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        assert copies == [2] * 4  # K and V in each of the 2 layers
        copies.clear()
        with grouped_query_sdpa_on_cpu():
            grouped = model(input_ids=ids, attention_mask=mask).logits
    assert not copies and sdpa_attention.use_gqa_in_sdpa is original
    real = mask.bool()
    torch.testing.assert_close(grouped[real], plain[real], rtol=0, atol=1e-12)
