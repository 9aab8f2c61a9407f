"""Weight sync into a running vLLM engine (CPU build, in a Ray actor): after `load_weights`
the engine generates what the new weights generate - greedy tokens and log-probs equal to
Transformers running those weights - in memory (a state dict) and from disk (a saved
checkpoint), and the prefix cache does not serve KV computed with the old weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datagen.teachers.conftest import VLLM_AVAILABLE, VLLM_SKIP_REASON, tiny_model_dir

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not VLLM_AVAILABLE, reason=VLLM_SKIP_REASON)]
NEW_TOKENS = 12


def _probe_actor_class():
    from datagen.teachers.episode import TurnRequest
    from datagen.teachers.vllm_weights import SyncedVLLMEngineActor

    class ProbedEngine(SyncedVLLMEngineActor):
        """The real engine actor plus one greedy turn from given prompt ids (test probe)."""

        async def greedy(self, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
            await self.backend.start()
            gen = await self.backend.generate(TurnRequest(messages=[], prompt_ids=prompt_ids,
                                                          tools=[], max_tokens=NEW_TOKENS,
                                                          key="probe"))
            assert gen.error is None, gen.error
            return gen.token_ids, [values[0] for values in gen.topk_logprobs]

    return ProbedEngine


def _transformers_greedy(model_dir: Path, prompt_ids: list[int], length: int,
                         ) -> tuple[list[int], list[float]]:
    """Greedy continuation of `length` tokens and each one's log-prob, by Transformers."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids, logprobs = list(prompt_ids), []
    with torch.no_grad():
        for _ in range(length):
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            token = int(logp.argmax())
            ids.append(token)
            logprobs.append(float(logp[token]))
    return ids[len(prompt_ids):], logprobs


@pytest.fixture(scope="module")
def engine(ray_head):
    import ray

    from datagen.teachers.config import TeacherConfig

    config = TeacherConfig(
        backend="vllm", name="sync-probe",
        vllm={"model": str(tiny_model_dir()), "num_gpus": 0, "dtype": "float32",
              "max_model_len": 1024, "enforce_eager": True, "cpu_kv_cache_gib": 1,
              "engine_kwargs": {"enable_prefix_caching": True}},
        sampling={"max_tokens_per_turn": NEW_TOKENS, "temperature": 0.0, "logprobs": 1})
    actor = ray.remote(_probe_actor_class()).options(
        num_cpus=1, max_concurrency=100,
        runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}},
    ).remote(config.model_dump_json())
    ray.get(actor.ready.remote(), timeout=600)
    yield actor
    ray.kill(actor)


@pytest.fixture(scope="module")
def other_model(tmp_path_factory) -> Path:
    """The 'updated policy': another random Qwen2 of the same shape and tokenizer (seed 1) with a
    random final-norm scale. A random model with tied embeddings greedily repeats the prompt's
    last token whatever its seed (each embedding is most similar to itself), so two seeds alone
    generate the same tokens and only their log-probs tell them apart; the scale breaks that."""
    import torch
    from transformers import AutoModelForCausalLM

    from scripts.make_tiny_model import make_tiny_model

    directory = make_tiny_model(tmp_path_factory.mktemp("qwen2-seed1"), seed=1)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    with torch.no_grad():
        norm = model.model.norm.weight
        norm.copy_(torch.randn(norm.shape, generator=torch.Generator().manual_seed(1)))
    model.save_pretrained(str(directory))
    return directory


def test_loaded_weights_generate_what_transformers_generates_with_them(engine, other_model,
                                                                        tmp_path):
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    text = "SELECT name, email FROM users WHERE id = 3 ORDER BY name; " * 6
    prompt = tokenizer(text)["input_ids"]
    assert len(prompt) > 48  # whole KV blocks: a prefix cache could serve them
    old_ids, old_lp = _transformers_greedy(tiny_model_dir(), prompt, NEW_TOKENS)
    new_ids, new_lp = _transformers_greedy(other_model, prompt, NEW_TOKENS)
    assert old_ids != new_ids and len(set(new_ids)) > 1  # told apart by their output

    ids, lp = ray.get(engine.greedy.remote(prompt))  # also fills the prefix cache
    assert ids == old_ids and lp == pytest.approx(old_lp, abs=1e-3)

    state = AutoModelForCausalLM.from_pretrained(other_model, dtype=torch.float32).state_dict()
    seconds = ray.get(engine.load_weights.remote(weights=list(state.items())))
    ids, lp = ray.get(engine.greedy.remote(prompt))  # same prompt: a stale cache would show
    assert ids == new_ids and lp == pytest.approx(new_lp, abs=1e-3)
    assert seconds > 0

    # back, from disk: the full state dict (a tied checkpoint lacks lm_head.weight)
    from safetensors.torch import save_file

    directory = tmp_path / "old-weights"
    directory.mkdir()
    old_state = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    save_file({k: v.clone() for k, v in old_state.state_dict().items()},
              str(directory / "model.safetensors"))
    ray.get(engine.load_weights.remote(path=str(directory)))
    ids, lp = ray.get(engine.greedy.remote(prompt))
    assert ids == old_ids and lp == pytest.approx(old_lp, abs=1e-3)


def test_a_tied_model_without_lm_head_loads_in_memory_and_is_refused_from_disk(
        engine, other_model, tmp_path):
    """`named_parameters()` of a tied model and its `save_pretrained` checkpoint lack
    lm_head.weight; vLLM alone would keep the old LM head and generate neither model."""
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(tiny_model_dir())("SELECT id FROM users; " * 8)[
        "input_ids"]
    new_ids, new_lp = _transformers_greedy(other_model, prompt, NEW_TOKENS)
    model = AutoModelForCausalLM.from_pretrained(other_model, dtype=torch.float32)
    params = list(model.named_parameters())
    assert "lm_head.weight" not in dict(params)
    ray.get(engine.load_weights.remote(weights=params))
    ids, lp = ray.get(engine.greedy.remote(prompt))
    assert ids == new_ids and lp == pytest.approx(new_lp, abs=1e-3)

    with pytest.raises(ray.exceptions.RayTaskError, match="has no lm_head.weight"):
        ray.get(engine.load_weights.remote(path=str(other_model)))


def test_exactly_one_source_is_required(engine):
    import ray

    with pytest.raises(ray.exceptions.RayTaskError, match="exactly one of"):
        ray.get(engine.load_weights.remote())
