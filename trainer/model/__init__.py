"""The modified Qwen2.5 (split embeddings, landmark attention, meta-cognitive head)."""

from trainer.model.builders import BUILDERS, build_model, count_parameters, qwen2_5_1_5b, \
    qwen2_5_32b, tiny
from trainer.model.config import AgentQwen2Config
from trainer.model.modeling import AgentCausalLMOutput, AgentQwen2ForCausalLM

__all__ = ["AgentQwen2Config", "AgentQwen2ForCausalLM", "AgentCausalLMOutput", "BUILDERS",
           "build_model", "count_parameters", "tiny", "qwen2_5_1_5b", "qwen2_5_32b"]
