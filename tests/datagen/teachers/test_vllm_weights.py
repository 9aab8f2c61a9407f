"""Weight sync into a running vLLM engine (CPU build, in a Ray actor): after `load_weights`
the engine generates what the new weights generate - greedy tokens and log-probs equal to
Transformers running those weights - in memory (a state dict) and from disk (a saved
checkpoint), and the prefix cache does not serve KV computed with the old weights."""

from __future__ import annotations

import time
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

        async def turn(self, prompt_ids: list[int]) -> dict:
            """One greedy turn as the episode loop runs it: its ids, version, error."""
            await self.backend.start()
            gen = await self.backend.generate(TurnRequest(messages=[], prompt_ids=prompt_ids,
                                                          tools=[], max_tokens=NEW_TOKENS,
                                                          key="turn"))
            return {"ids": gen.token_ids, "version": gen.weights_version, "error": gen.error}

        async def engine_paused(self) -> bool:
            return await self.backend.engine.is_paused()

        def check(self, source, shapes, tied) -> None:
            if not getattr(self, "unchecked", False):
                super().check(source, shapes, tied)

        async def load_unchecked(self, path: str) -> float:
            """load_weights with the fit check skipped: the load then fails inside vLLM, as
            one the check cannot foresee would (a file changed between check and load)."""
            self.unchecked = True
            try:
                return await self.load_weights(path=path)
            finally:
                self.unchecked = False

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


# --- atomic swaps: every turn runs under one weight version and records it ---

SWAP_TURNS = 16


@pytest.fixture(scope="module")
def swap_case(other_model, tmp_path_factory) -> dict:
    """Distinct prompts with each model's greedy continuation (they differ for every prompt),
    the old weights as a full-state directory and the new ones as a state dict."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    prompts = [tokenizer(f"SELECT name FROM users WHERE id = {i} AND city = 'c{i * 7}'; " * 3)[
        "input_ids"] for i in range(SWAP_TURNS)]
    old = [_transformers_greedy(tiny_model_dir(), p, NEW_TOKENS)[0] for p in prompts]
    new = [_transformers_greedy(other_model, p, NEW_TOKENS)[0] for p in prompts]
    assert all(a != b for a, b in zip(old, new)), "every turn tells the models apart"
    old_dir = tmp_path_factory.mktemp("old-full-state")
    state = AutoModelForCausalLM.from_pretrained(tiny_model_dir(), dtype=torch.float32)
    save_file({k: v.clone() for k, v in state.state_dict().items()},
              str(old_dir / "model.safetensors"))
    new_state = AutoModelForCausalLM.from_pretrained(other_model, dtype=torch.float32)
    return {"prompts": prompts, "old": old, "new": new, "old_dir": str(old_dir),
            "new_weights": list(new_state.state_dict().items())}


def _wait_for(engine, condition, what: str, timeout_s: float = 120) -> dict:
    import ray

    deadline = time.monotonic() + timeout_s
    while not condition(state := ray.get(engine.weights_state.remote())):
        assert time.monotonic() < deadline, f"never: {what} (last state {state})"
        time.sleep(0.05)
    return state


def test_turns_in_flight_finish_on_the_old_weights_and_turns_sent_during_a_swap_on_the_new(
        engine, swap_case):
    """The first wave is held in the engine (paused), so the swap is requested while all of
    it is in flight however fast the machine is; a second wave is sent while the swap
    drains. Old wave: old tokens and version; the rest: new tokens, next version."""
    import ray

    prompts, old, new = swap_case["prompts"], swap_case["old"], swap_case["new"]
    ray.get(engine.load_weights.remote(path=swap_case["old_dir"]))
    version = ray.get(engine.weights_state.remote())["version"]
    ray.get(engine.pause.remote())
    first = [engine.turn.remote(p) for p in prompts]
    _wait_for(engine, lambda s: s["in_flight"] == SWAP_TURNS, "the first wave in the engine")
    swap = engine.load_weights.remote(weights=swap_case["new_weights"])
    _wait_for(engine, lambda s: s["swapping"], "the swap started")
    second = [engine.turn.remote(p) for p in prompts]
    state = _wait_for(engine, lambda s: s["waiting"] == SWAP_TURNS, "the second wave held")
    assert state["in_flight"] == SWAP_TURNS and state["version"] == version
    ray.get(engine.resume.remote())
    assert ray.get(swap, timeout=300) > 0
    third = [engine.turn.remote(p) for p in prompts]  # after the swap returned
    for wave, expected, want_version in ((first, old, version), (second, new, version + 1),
                                         (third, new, version + 1)):
        for turn, tokens in zip(ray.get(wave), expected):
            assert turn["error"] is None and turn["version"] == want_version
            assert turn["ids"] == tokens
    assert not ray.get(engine.engine_paused.remote())


def test_a_swap_racing_a_stream_of_turns_never_mixes_weights_within_a_turn(engine, swap_case):
    """No staging: turns go out in a stream and the swap lands wherever it lands. Each turn
    is entirely the old model's or entirely the new one's, as its recorded version says."""
    import ray

    prompts, old, new = swap_case["prompts"], swap_case["old"], swap_case["new"]
    ray.get(engine.load_weights.remote(path=swap_case["old_dir"]))
    version = ray.get(engine.weights_state.remote())["version"]
    refs, swap = [], None
    for round_ in range(3):
        refs += [(i, engine.turn.remote(p)) for i, p in enumerate(prompts)]
        if round_ == 0:
            swap = engine.load_weights.remote(weights=swap_case["new_weights"])
    ray.get(swap, timeout=300)
    after = [(i, engine.turn.remote(p)) for i, p in enumerate(prompts)]
    for i, ref in refs + after:
        turn = ray.get(ref)
        assert turn["error"] is None and turn["version"] in (version, version + 1)
        assert turn["ids"] == (old[i] if turn["version"] == version else new[i]), \
            f"turn {i} (version {turn['version']}) is not that version's output"
    assert all(ray.get(ref)["version"] == version + 1 for _, ref in after)


def test_episodes_record_the_version_of_each_turn(engine, swap_case):
    import ray

    from tests.datagen.teachers.helpers import make_tasks

    version = ray.get(engine.weights_state.remote())["version"]
    for traj in ray.get(engine.rollout_batch.remote(make_tasks(3))):
        assert traj.meta["weights_versions"] == [version] * traj.meta["turns"]


def test_a_swap_that_cannot_drain_in_time_fails_and_the_old_weights_serve(engine, swap_case):
    import ray

    prompts, old = swap_case["prompts"], swap_case["old"]
    ray.get(engine.load_weights.remote(path=swap_case["old_dir"]))
    version = ray.get(engine.weights_state.remote())["version"]
    ray.get(engine.pause.remote())
    held = engine.turn.remote(prompts[0])
    _wait_for(engine, lambda s: s["in_flight"] == 1, "the turn in the engine")
    with pytest.raises(ray.exceptions.RayTaskError, match="SwapTimeout.*still in the engine"):
        ray.get(engine.load_weights.remote(weights=swap_case["new_weights"], drain_timeout_s=1))
    state = ray.get(engine.weights_state.remote())
    assert state["version"] == version and not state["swapping"]
    ray.get(engine.resume.remote())
    assert ray.get(held)["ids"] == old[0]
    assert ray.get(engine.turn.remote(prompts[1])) == {"ids": old[1], "version": version,
                                                       "error": None}


def test_weights_that_do_not_fit_are_refused_and_the_engine_keeps_serving(engine, swap_case,
                                                                          tmp_path):
    import ray
    import torch
    from safetensors.torch import save_file

    prompts, old = swap_case["prompts"], swap_case["old"]
    ray.get(engine.load_weights.remote(path=swap_case["old_dir"]))
    version = ray.get(engine.weights_state.remote())["version"]
    misshapen = dict(swap_case["new_weights"])
    misshapen["model.norm.weight"] = torch.ones(3)
    save_file({k: v.clone() for k, v in misshapen.items()}, str(tmp_path / "model.safetensors"))
    for kwargs, reason in (({"path": str(tmp_path / "nowhere")}, "is not a directory"),
                           ({"path": str(tmp_path)}, "misshapen: model.norm.weight"),
                           ({"weights": [(k, v) for k, v in swap_case["new_weights"]
                                         if k != "model.norm.weight"]}, "missing: model.norm")):
        with pytest.raises(ray.exceptions.RayTaskError, match=f"WeightsRejected.*{reason}"):
            ray.get(engine.load_weights.remote(**kwargs))
        assert not ray.get(engine.engine_paused.remote())
        assert ray.get(engine.turn.remote(prompts[0])) == {"ids": old[0], "version": version,
                                                           "error": None}


def test_a_load_that_fails_inside_vllm_resumes_the_engine_and_refuses_turns(engine, swap_case,
                                                                             tmp_path):
    """Last in the module: it leaves the engine unusable. vLLM 0.32's reload is not
    transactional (layers go to the meta device first, a misshapen tensor fails halfway): the
    engine is resumed all the same, and turns fail as rows naming the failed load instead of
    running that model (which would kill the engine core)."""
    import ray
    import torch
    from safetensors.torch import save_file

    version = ray.get(engine.weights_state.remote())["version"]
    misshapen = dict(swap_case["new_weights"])
    misshapen["model.norm.weight"] = torch.ones(3)
    save_file({k: v.clone() for k, v in misshapen.items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ray.exceptions.RayTaskError, match="WeightLoadFailed.*failed inside vLLM"):
        ray.get(engine.load_unchecked.remote(str(tmp_path)))
    assert not ray.get(engine.engine_paused.remote())
    state = ray.get(engine.weights_state.remote())
    assert state["version"] == version and "failed inside vLLM" in state["broken"]
    assert not state["swapping"] and state["in_flight"] == 0
    turns = ray.get([engine.turn.remote(p) for p in swap_case["prompts"][:4]])
    for turn in turns:
        assert turn["ids"] is None and "failed inside vLLM" in turn["error"]
        assert turn["version"] == version
