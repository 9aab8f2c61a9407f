"""Free-form completions from a teacher backend: prompts in, reply texts out.

The LLM critic (critics/llm_critic.py) needs a model that answers prompts, not one that plays
episodes. `BackendCompleter` puts each prompt into a one-turn conversation (a short system turn
and the prompt as the user turn) and sends all of a batch to the backend at once, the way
`EpisodeRunner` sends turns: the HF micro-batcher decodes them as one batch, an endpoint gets
concurrent requests under its AIMD limit (and its request cache, so a resumed run does not pay
twice). Token backends get the exact prompt ids of our own template rendering.
"""

from __future__ import annotations

import hashlib

from datagen.chat import IM_END, IM_START, generation_prompt, user_turn
from datagen.teachers.episode import Generation, TurnBackend, TurnRequest, run_sessions
from datagen.teachers.llm import run_sync


class BackendCompleter:
    """`complete(prompts) -> replies` over a TurnBackend; a reply that could not be generated
    (the backend's retries exhausted, a failed batch) is returned as an exception."""

    def __init__(self, backend: TurnBackend, max_tokens: int, system_prompt: str,
                 max_concurrent: int = 64, max_total_tokens: int | None = None) -> None:
        self.backend = backend
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.max_concurrent = max_concurrent
        self.max_total_tokens = max_total_tokens  # prompt + reply cap (token backends)

    def __call__(self, prompts: list[str]) -> list[str | BaseException]:
        if not prompts:
            return []
        return run_sync(self._complete_all(prompts))

    async def _complete_all(self, prompts: list[str]) -> list[str | BaseException]:
        generations = await run_sessions(self.backend, prompts, self._one, self.max_concurrent,
                                         return_exceptions=True)
        return [reply_of(gen) for gen in generations]

    async def _one(self, prompt: str) -> Generation:
        request = self.request(prompt)
        too_long = self.over_budget(request)
        if too_long:
            return Generation(error=too_long)
        return await self.backend.generate(request)

    def over_budget(self, request: TurnRequest) -> str | None:
        """Why a prompt is not sent: it leaves no room for the reply within the context."""
        if self.max_total_tokens is None or request.prompt_ids is None:
            return None
        needed = len(request.prompt_ids) + request.max_tokens
        if needed <= self.max_total_tokens:
            return None
        return (f"context_exhausted: a prompt of {len(request.prompt_ids)} tokens + "
                f"{request.max_tokens} for the reply exceeds max_total_tokens="
                f"{self.max_total_tokens}")

    def request(self, prompt: str) -> TurnRequest:
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": prompt}]
        prompt_ids = None
        tokenizer = self.backend.tokenizer
        if tokenizer is not None:
            text = (f"{IM_START}system\n{self.system_prompt}{IM_END}\n" + user_turn(prompt)
                    + generation_prompt())
            prompt_ids = tokenizer.encode(text, add_special_tokens=False)
        key = "completion:" + hashlib.sha256(prompt.encode()).hexdigest()[:16]
        return TurnRequest(messages, prompt_ids, [], self.max_tokens, key)


def reply_of(gen: Generation | BaseException) -> str | BaseException:
    if isinstance(gen, BaseException):
        return gen
    if gen.error is not None:
        return RuntimeError(gen.error)
    return gen.text
