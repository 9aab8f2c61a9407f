"""Configuration of the modified Qwen2.5: a Qwen2Config plus the three modifications.

Every modification is off by default, so `AgentQwen2Config(**plain_qwen2_fields)` describes a
model that computes exactly what plain Qwen2 computes. A plain Qwen2/Qwen2.5 `config.json`
loads into this class unchanged (the new fields take their defaults, or the values passed to
`from_pretrained` as keyword arguments).
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import Qwen2Config


@strict
class AgentQwen2Config(Qwen2Config):
    """Qwen2 shape + switches for split embeddings, landmark attention and the MCH.

    Split embeddings:
      split_embeddings: a second input-embedding matrix used at tool-call (ACT) positions,
        initialised as a copy of the base one.
      tool_call_start_id: id of `<tool_call>`; the ACT embedding starts at this token inside an
        ACT span (training) or once it is generated (generation), so both modes agree.
      im_end_id: id of `<|im_end|>`; the generation state machine leaves ACT mode one token
        after it (the span ends with `<|im_end|>\\n`).
    Landmark attention (Mohtashami & Jaggi 2023):
      use_landmark: insert a landmark token after every `landmark_block_size` tokens and use
        the grouped softmax; with block size >= sequence length it is causal attention.
      landmark_retrieval_topk: blocks retrieved per query when decoding from a cache.
      landmark_query_chunk: queries processed per chunk in training (bounds memory at
        O(chunk x length) per layer instead of O(length^2)).
    Meta-cognitive head:
      use_mch: one extra attention block over the last hidden states that scores each ACT
        step (probability that the step is correct).
      mch_hidden_size / mch_num_heads: width of that block (kept small: it reads the
        backbone's states, it does not need the backbone's width).
      mch_detach_backbone: train the head without moving the backbone (the LM objective
        stays exactly SAD); set False to let the MCH loss shape the representations.
      mch_threshold / mch_num_candidates: generation-time hybrid mode.
    """

    model_type = "agent_qwen2"

    split_embeddings: bool = False
    tool_call_start_id: int | None = None
    im_end_id: int | None = None
    use_landmark: bool = False
    landmark_block_size: int = 64
    landmark_retrieval_topk: int = 4
    landmark_query_chunk: int = 1024
    use_mch: bool = False
    mch_hidden_size: int = 256
    mch_num_heads: int = 4
    mch_detach_backbone: bool = True
    mch_threshold: float = 0.5
    mch_num_candidates: int = 4

    def __post_init__(self, **kwargs):
        if self.landmark_block_size < 1:
            raise ValueError(f"landmark_block_size must be >= 1, got {self.landmark_block_size}")
        if self.mch_hidden_size % self.mch_num_heads:
            raise ValueError("mch_hidden_size must be divisible by mch_num_heads")
        super().__post_init__(**kwargs)

    @property
    def modified(self) -> bool:
        """True when any modification is on (False: the model is plain Qwen2)."""
        return self.split_embeddings or self.use_landmark or self.use_mch
