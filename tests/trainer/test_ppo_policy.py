"""The policy side of PPO without Ray: the trainer's `policy` backend found through datagen's
registry, rollouts whose recorded behaviour log-probs equal the learner's teacher-forced
scores on exactly the generated tokens, and the value head's save/load round trip."""

from __future__ import annotations

import pytest
import torch

from datagen.teachers import make_teacher
from datagen.teachers.config import EpisodeConfig, HFConfig, SamplingConfig, TeacherConfig
from datagen.teachers.registry import registered_backends
from datagen.types import Task
from tests.trainer.helpers import tiny_model
from trainer.agent_backend import PolicyBackend
from trainer.generation import GenerationConfig
from trainer.model import AgentQwen2ForCausalLM
from trainer.rl.batches import build_batch, turn_ends
from trainer.rl.rewards import episode_reward
from trainer.config import RewardConfig
from trainer.rl.value_head import (VALUE_HEAD_FILE, PolicyWithValue, ValueHead,
                                   load_value_head)
from trainer.tokens import load_tokenizer, special_ids


@pytest.fixture(scope="module")
def checkpoint(tiny_tokenizer_dir, tmp_path_factory):
    tokenizer = load_tokenizer(str(tiny_tokenizer_dir))
    ids = special_ids(tokenizer)
    model = tiny_model(vocab_size=1024, split_embeddings=True, use_mch=True,
                       tool_call_start_id=ids["tool_call_start"], im_end_id=ids["im_end"],
                       pad_token_id=ids["pad"])
    directory = tmp_path_factory.mktemp("policy_ckpt")
    model.save_pretrained(directory)
    tokenizer.save(directory)
    return directory


def _tasks(count: int) -> list[Task]:
    from datagen.tasks import TaskSource
    from datagen.teachers.base import EnvPool

    return TaskSource(("sql",), (1.0,), seed=3, count=count).generate(0, count, EnvPool())


def test_the_policy_backend_is_registered_and_plays_through_the_episode_loop(checkpoint):
    assert "policy" in registered_backends()
    teacher = make_teacher(TeacherConfig(
        backend="policy", name="student", hf=HFConfig(model=str(checkpoint)),
        sampling=SamplingConfig(temperature=1.0, max_tokens_per_turn=6, seed=1, logprobs=0),
        episode=EpisodeConfig(max_turns=2)))
    trajectories = teacher.rollout_batch(_tasks(2))
    assert len(trajectories) == 2
    for traj in trajectories:
        assert traj.teacher == "student" and traj.meta["backend"] == "policy"
        assert traj.tokens is not None and traj.steps  # the model was asked for turns
        assert traj.error_kind == "truncated"  # 6 random tokens never close a turn


def test_recorded_logprobs_are_the_learners_scores_of_the_generated_tokens(checkpoint):
    model = AgentQwen2ForCausalLM.from_pretrained(str(checkpoint)).eval()
    temperature = 0.7
    backend = PolicyBackend(model, str(checkpoint), GenerationConfig(
        max_new_tokens=5, temperature=temperature, hybrid=False, seed=4), record_logprobs=True)
    config = TeacherConfig(backend="policy", hf=HFConfig(model=str(checkpoint)),
                           sampling=SamplingConfig(temperature=temperature, logprobs=1,
                                                   max_tokens_per_turn=5),
                           episode=EpisodeConfig(max_turns=3, on_invalid_turn="feedback"))
    from datagen.teachers.llm import LLMTeacher

    trajectories = LLMTeacher(config, backend).rollout_batch(_tasks(3))
    rewards = [episode_reward(traj, RewardConfig()) for traj in trajectories]
    groups = [traj.task.id for traj in trajectories]
    batch = build_batch(trajectories, rewards, groups, pad_id=0, max_len=1 << 16)
    assert len(batch) == 3 and batch.dropped["turn_mismatch"] == 0
    assert batch.mask.sum(1).tolist() == [5, 5, 5]  # one truncated turn of 5 tokens each
    # generated tokens are REASON/ACT tokens; the prompt is never marked
    assert bool((batch.span_ids[batch.mask] >= 1).all()) and not bool(batch.mask[:, :10].any())
    scored = PolicyWithValue(model, ValueHead(model.config.hidden_size))(
        batch.input_ids, batch.span_ids, temperature=temperature, chunk_size=7)
    gap = (scored["logprobs"] - batch.behaviour_logprobs).abs()[batch.mask]
    assert float(gap.max().detach()) < 1e-4
    assert torch.equal(scored["values"], torch.zeros_like(scored["values"]))  # zero-init critic
    # every turn's reward sits on its last generated token
    for row, index in enumerate(batch.rows):
        ends = turn_ends(batch.mask[row].numpy())
        assert batch.rewards[row, ends].tolist() == pytest.approx(rewards[index].turn_rewards)
        assert float(batch.rewards[row].sum()) == pytest.approx(rewards[index].total)


def test_turn_ends_are_the_last_token_of_each_generated_run():
    import numpy as np

    assert turn_ends(np.array([0, 1, 1, 0, 0, 1, 0, 1], dtype=bool)) == [2, 5, 7]


def test_value_head_round_trips_and_plain_loaders_ignore_it(checkpoint, tmp_path):
    model = AgentQwen2ForCausalLM.from_pretrained(str(checkpoint))
    head = ValueHead(model.config.hidden_size)
    torch.nn.init.normal_(head.linear.weight)
    torch.nn.init.normal_(head.linear.bias)
    PolicyWithValue(model, head).save_pretrained(tmp_path)
    assert (tmp_path / VALUE_HEAD_FILE).exists()
    loaded = load_value_head(tmp_path, model.config.hidden_size)
    for name, tensor in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)
    reloaded, info = AgentQwen2ForCausalLM.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"]
    assert not any("value_head" in name or "linear" in name for name in reloaded.state_dict())
    assert load_value_head(checkpoint, model.config.hidden_size) is None  # a SAD checkpoint
    with pytest.raises(ValueError, match="value head of width"):
        load_value_head(tmp_path, model.config.hidden_size + 1)


class PlainAdamEngine:
    """The engine surface the update uses (module, backward, step), without Ray Train's
    DDP preparation (the end-to-end test runs the real DDPEngine)."""

    def __init__(self, module: torch.nn.Module, lr: float) -> None:
        self.module = module
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=lr)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(norm)


@pytest.mark.parametrize("advantage", ["gae", "grpo", "rloo"])
def test_an_update_moves_probability_towards_the_rewarded_rollout(checkpoint, advantage):
    from datagen.teachers.llm import LLMTeacher
    from trainer.config import PPOConfig
    from trainer.rl.update import score_rollouts, update

    torch.manual_seed(0)
    model = AgentQwen2ForCausalLM.from_pretrained(str(checkpoint))
    backend = PolicyBackend(model, str(checkpoint), GenerationConfig(
        max_new_tokens=6, temperature=1.0, hybrid=False, seed=2), record_logprobs=True)
    config = TeacherConfig(backend="policy", hf=HFConfig(model=str(checkpoint)),
                           sampling=SamplingConfig(logprobs=1, max_tokens_per_turn=6),
                           episode=EpisodeConfig(max_turns=1))
    trajectories = LLMTeacher(config, backend).rollout_batch(_tasks(1) * 2)  # one task, twice
    rewards = [episode_reward(traj, RewardConfig()) for traj in trajectories]
    batch = build_batch(trajectories, rewards, ["task", "task"], pad_id=0, max_len=1 << 16)
    # the first rollout is the good one: its only turn earns +1, the other's -1
    batch.rewards[0][batch.rewards[0] != 0] = 1.0
    batch.rewards[1][batch.rewards[1] != 0] = -1.0
    ppo = PPOConfig(advantage=advantage, group_size=2, tasks_per_iteration=1, minibatch_size=2,
                    epochs=4, kl_coef=0.0)
    head = ValueHead(model.config.hidden_size) if advantage == "gae" else None
    policy = PolicyWithValue(model, head)
    scored = score_rollouts(policy, None, batch, ppo, torch.device("cpu"))
    assert float(scored.advantages[0][batch.mask[0]].mean()) > 0
    assert float(scored.advantages[1][batch.mask[1]].mean()) < 0
    if advantage != "gae":  # the episode's group advantage on each of its tokens, unwhitened
        expected = {"grpo": 1 / (2 ** 0.5 + 1e-4), "rloo": 2.0}[advantage]  # rewards +1, -1
        assert scored.advantages[0][batch.mask[0]].tolist() == pytest.approx(
            [expected] * int(batch.mask[0].sum()), abs=1e-4)
    stats = update(PlainAdamEngine(policy, lr=1e-2), batch, scored, ppo, torch.device("cpu"),
                   torch.Generator().manual_seed(0))
    assert stats["updates"] == 4 and (advantage != "gae" or "value_loss" in stats)
    with torch.no_grad():
        after = policy(batch.input_ids, batch.span_ids, 1.0, with_entropy=False)["logprobs"]
    change = [float((after[row] - scored.old_logprobs[row])[batch.mask[row]].sum())
              for row in range(2)]
    assert change[0] > 0 > change[1]
