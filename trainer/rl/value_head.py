"""The critic: a linear value head on the policy's final hidden states, and the policy +
value wrapper the PPO learner trains.

The head is not part of the model's weights: it is saved beside a checkpoint as
`value_head.safetensors`, so `AgentQwen2ForCausalLM.from_pretrained` (and any plain Qwen2
loader) reads the policy as before and never sees it, while a resumed PPO run (or a later one
that wants a warm critic) loads it with `load_value_head`. It starts at zero (every state
worth 0): a random critic would inject noise into the first iterations' advantages.

`PolicyWithValue.forward` scores a batch of token sequences in one pass through the model's
own forward (the ACT embedding and landmarks run as in training): per token, the log-prob of
that token given its prefix at the sampling temperature, the entropy of that distribution,
and the value of the state before it. Everything is aligned to the *target* token: index j
holds log p(x_j | x_<j), so index 0 is always 0 (a sequence's first token is never generated).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trainer.rl.losses import entropy_from_logits

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueHead(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def save_value_head(head: ValueHead, directory: str | Path) -> None:
    from safetensors.torch import save_file

    state = {name: tensor.detach().cpu().contiguous() for name, tensor in head.state_dict().items()}
    save_file(state, str(Path(directory) / VALUE_HEAD_FILE),
              metadata={"hidden_size": str(head.linear.in_features)})


def load_value_head(directory: str | Path | None, hidden_size: int) -> ValueHead | None:
    """The head saved beside a checkpoint, or None when it has none (a SAD/DPO checkpoint);
    a head of another width is refused (it belongs to another model)."""
    if directory is None or not (Path(directory) / VALUE_HEAD_FILE).exists():
        return None
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = str(Path(directory) / VALUE_HEAD_FILE)
    with safe_open(path, framework="pt") as handle:
        saved_size = int((handle.metadata() or {}).get("hidden_size", hidden_size))
    if saved_size != hidden_size:
        raise ValueError(f"{path}: value head of width {saved_size}, model hidden size "
                         f"{hidden_size}")
    head = ValueHead(hidden_size)
    head.load_state_dict(load_file(path))
    return head


class PolicyWithValue(nn.Module):
    """The policy model and its value head as one module (one DDP wrapper, one optimizer)."""

    def __init__(self, policy: nn.Module, value_head: ValueHead | None) -> None:
        super().__init__()
        self.policy = policy
        self.value_head = value_head

    @property
    def config(self):
        return self.policy.config

    def save_pretrained(self, directory: str | Path) -> None:
        """The policy in Hugging Face format, the value head beside it."""
        self.policy.save_pretrained(str(directory))
        if self.value_head is not None:
            save_value_head(self.value_head, directory)

    def forward(self, input_ids: torch.Tensor, span_ids: torch.Tensor, temperature: float = 1.0,
                chunk_size: int = 256, with_entropy: bool = True) -> dict[str, torch.Tensor]:
        """logprobs, entropy and values [B, T], aligned to the target token (see module)."""
        targets = input_ids[:, 1:]

        def score(hidden: torch.Tensor, lm_head: nn.Module):
            states = hidden[:, :-1]
            logprobs, entropies = [], []
            for start in range(0, states.shape[1], chunk_size):
                logits = lm_head(states[:, start:start + chunk_size]).float() / temperature
                logp = torch.log_softmax(logits, dim=-1)
                logprobs.append(logp.gather(-1, targets[:, start:start + chunk_size, None])
                                .squeeze(-1))
                if with_entropy:
                    entropies.append(entropy_from_logits(logits))
            parts = {"logprobs": _shift(torch.cat(logprobs, 1))}
            if with_entropy:
                parts["entropy"] = _shift(torch.cat(entropies, 1))
            if self.value_head is not None:
                parts["values"] = _shift(self.value_head(states))
            return hidden.new_zeros(()), parts

        out = self.policy(input_ids=input_ids, span_ids=span_ids, use_cache=False,
                          loss_fn=score)
        return out.loss_parts


def _shift(per_position: torch.Tensor) -> torch.Tensor:
    """[B, T-1] scores of positions 0..T-2 -> [B, T] aligned to target tokens 1..T-1."""
    return torch.cat([per_position.new_zeros(per_position.shape[0], 1), per_position], 1)
