"""The `hf` teacher with a tiny random Qwen2: exact tokens, raw top-k, batching, the pipeline."""

from __future__ import annotations

import orjson
import pyarrow.parquet as pq
import pytest

from datagen.config import GenerateConfig
from datagen.teachers import make_teacher
from datagen.teachers.config import TeacherConfig
from datagen.types import Span
from tests.datagen.teachers.helpers import (chatty_bias, check_row_alignment,
                                            check_trajectory_alignment, make_tasks)

K = 4


def _hf_config(model, **sampling) -> TeacherConfig:
    return TeacherConfig(backend="hf", name="tiny-hf", hf={"model": str(model)},
                         sampling={"max_tokens_per_turn": 24, "temperature": 1.0, "seed": 1,
                                   "logprobs": K, **sampling},
                         episode={"max_turns": 3, "max_total_tokens": 4096})


@pytest.fixture(scope="module")
def hf_teacher(tiny_model):
    from transformers import AutoTokenizer

    bias = chatty_bias(AutoTokenizer.from_pretrained(tiny_model))
    return make_teacher(_hf_config(tiny_model, logit_bias=bias))


@pytest.fixture(scope="module")
def hf_trajectories(hf_teacher):
    return hf_teacher.rollout_batch(make_tasks(6, envs=("sql", "fs")))


def test_every_episode_fails_as_data_with_exact_tokens(hf_teacher, hf_trajectories):
    assert len(hf_trajectories) == 6
    turns = 0
    for traj in hf_trajectories:
        assert not traj.success and traj.error, "a random model cannot solve a task"
        assert traj.error.split(":")[0] in {"turn 0", "turn 1", "turn 2", "wrong_answer",
                                            "max_turns"}
        assert traj.error_kind and traj.error_kind in traj.error  # the kind to count by
        generated = check_trajectory_alignment(hf_teacher.tokenizer, traj, K)
        assert generated == traj.meta["completion_tokens"] > 0
        assert traj.meta["sampling"]["logprobs"] == K and traj.meta["tokenizer"]
        turns += traj.meta["turns"]
        for step in traj.steps:
            assert step.raw is not None
            assert step.call is None or step.error is not None  # garbage never validates
    assert turns > len(hf_trajectories), "feedback mode lets some episodes take several turns"


def test_topk_is_the_models_raw_next_token_distribution(hf_teacher, hf_trajectories):
    import torch

    traj = max(hf_trajectories, key=lambda t: t.meta["completion_tokens"])
    ids = traj.tokens.ids
    with torch.inference_mode():
        logits = hf_teacher.backend.model(input_ids=torch.tensor([ids])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    checked = 0
    for position, (top_ids, top_values) in enumerate(zip(*traj.tokens.topk_lists())):
        if not top_ids:
            continue
        expected = logprobs[position - 1].topk(K)  # token t is predicted at position t - 1
        assert top_ids == expected.indices.tolist()
        assert top_values == pytest.approx(expected.values.tolist(), abs=1e-3)
        checked += 1
    assert checked == traj.meta["completion_tokens"]


def test_batched_greedy_decoding_equals_one_at_a_time(tiny_model):
    teacher = make_teacher(_hf_config(tiny_model, temperature=0.0))
    tasks = make_tasks(3, envs=("sql", "fs", "enterprise"))  # very different prompt lengths
    together = teacher.rollout_batch(tasks)
    alone = [teacher.rollout_batch([task])[0] for task in tasks]
    assert [t.tokens.ids for t in together] == [t.tokens.ids for t in alone]
    assert teacher.backend.batcher is None  # the batcher lives for one batch only


def test_microbatcher_serves_all_live_episodes_in_one_batch(hf_teacher):
    batches = []
    original = hf_teacher.backend.generate_batch

    def recording(requests):
        batches.append(len(requests))
        return original(requests)

    hf_teacher.backend.generate_batch = recording
    try:
        hf_teacher.rollout_batch(make_tasks(5, envs=("sql",), seed=3))
    finally:
        hf_teacher.backend.generate_batch = original
    assert batches[0] == 5 and sum(batches) >= 5


def test_critic_prompts_are_completed_in_one_batch_with_the_teachers_model(hf_teacher):
    from critics.llm_critic import CRITIC_SYSTEM_PROMPT
    from datagen.teachers.completion import BackendCompleter

    backend = hf_teacher.backend
    completer = BackendCompleter(backend, max_tokens=6, system_prompt=CRITIC_SYSTEM_PROMPT)
    request = completer.request("Review this call.")
    assert backend.tokenizer.decode(request.prompt_ids) == (
        f"<|im_start|>system\n{CRITIC_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n"
        "Review this call.<|im_end|>\n<|im_start|>assistant\n")
    batches, original = [], backend.generate_batch

    def recording(requests):
        batches.append(len(requests))
        return original(requests)

    backend.generate_batch = recording
    try:
        replies = completer([f"Review call {i}." for i in range(5)])
    finally:
        backend.generate_batch = original
    assert batches == [5] and len(replies) == 5 and all(isinstance(r, str) for r in replies)
    tight = BackendCompleter(backend, max_tokens=6, system_prompt=CRITIC_SYSTEM_PROMPT,
                             max_total_tokens=len(request.prompt_ids) + 6)
    fits, too_long = tight(["Review this call.", "Review this call, and this one too."])
    assert isinstance(fits, str) and "context_exhausted" in str(too_long)


@pytest.mark.slow
def test_hf_teacher_in_the_ray_pipeline_writes_aligned_topk(ray_head, tiny_model, tmp_path):
    from transformers import AutoTokenizer

    from datagen.pipeline import run_generation

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    teacher = _hf_config(tiny_model, logit_bias=chatty_bias(tokenizer))
    config = GenerateConfig(out=str(tmp_path / "out"), num_trajectories=6, chunk_size=3,
                            envs=[{"name": "sql"}], teacher=teacher, num_workers=1,
                            critics={"backend": "llm"}, progress=False)
    summary = run_generation(config)
    assert summary.complete and summary.counts["trajectories"] == 6
    # the failed rollouts went to the LLM critic (the teacher's model): a random model's
    # critiques cannot be read, so each is a counted rejection, not a crash
    critics = summary.stats["critics"]
    assert critics["counts"]["failed_rollouts"] == 6 and summary.counts["repairs"] == 0
    assert critics["rejected"] == {"critic_gave_no_call": 6}  # counted by rejection kind
    assert "not emitted: critic_gave_no_call 6" in summary.format()
    table = pq.read_table(tmp_path / "out" / "trajectories")
    assert {"input_ids", "span_ids", "teacher_topk_ids", "teacher_topk_logprobs", "tokenizer",
            "teacher_meta"} <= set(table.column_names)
    assert str(table.schema.field("teacher_topk_ids").type) == "list<element: list<element: int32>>"
    for row in table.to_pylist():
        assert row["error"] and not row["success"] and row["teacher"] == "tiny-hf"
        assert row["tokenizer"] == str(tiny_model)
        meta = orjson.loads(row["teacher_meta"])
        assert meta["backend"] == "hf" and meta["sampling"]["temperature"] == 1.0
        generated = check_row_alignment(tokenizer, row["text"], [Span(**s) for s in row["spans"]],
                                        row["input_ids"], row["span_ids"],
                                        row["teacher_topk_ids"], row["teacher_topk_logprobs"], K)
        assert generated == meta["completion_tokens"]


def test_a_logit_bias_past_the_models_logits_is_refused_when_the_model_loads(tiny_model):
    """Before, every turn indexed past the logits: an IndexError in every row, the run
    "complete"; now the chunk worker's setup reports it before any chunk runs."""
    from datagen.teachers.hf import HFBackend

    config = _hf_config(tiny_model, logit_bias={1_000_000: 1.0, 5: -1.0})
    with pytest.raises(ValueError, match=r"^teacher.sampling.logit_bias: token id\(s\) "
                                         r"\[1000000\] outside the model's [\d,]+ logits$"):
        HFBackend(config.hf, config.sampling)


def test_the_critics_own_model_names_its_logit_bias_under_critics_llm(tiny_model):
    """A hub model for critics.llm is out of the preflight's reach; its load names the field
    the user set, not the teacher's (which may be the oracle, with no logit_bias at all)."""
    from datagen.config import CriticsConfig
    from datagen.pipeline.stages.critics import make_critic

    critic_model = _hf_config(tiny_model, logit_bias={1_000_000: 1.0}).model_dump()
    critics = CriticsConfig(backend="llm", llm=critic_model)
    with pytest.raises(ValueError, match=r"^critics\.llm\.sampling\.logit_bias: token id\(s\) "
                                         r"\[1000000\] outside the model's [\d,]+ logits$"):
        make_critic(critics)
