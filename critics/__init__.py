"""critics: error injection, critiques and repairs, safety refusal pairs, and the IRR harness.

    inject.inject_error(traj, env, seed)        -> Injection (wrong call executed in the env)
    repair.repair_injection(env, inj, critic, rng) / repair.repair_failed(env, traj, critic, rng)
                                                -> Repair (checker-verified) or Rejected
    rule_critic.rule_critic / llm_critic.LLMCritic(complete)   the critic callables
    safety.safety_cases(env, traj) + safety_pairs.safety_preference(...)  DPO pairs
    safety.register_safety_cases(EnvClass)(builder)   the cases of an environment class
    irr.evaluate_irr(policy, envs, num_tasks, seed)            recovery rate per env and kind

The pipeline stage that wires these together is `datagen.pipeline.stages.critics.CriticStage`.
In repair text the wrong call's span kind is `ERROR` (no loss); the critique is REASON, the fix
ACT. What is not produced comes back as `mutators.Rejected(kind, detail)`, counted by kind.
"""

from critics.critique import Critic, Critique, CritiqueRequest
from critics.inject import Injection, inject_error
from critics.irr import evaluate_irr, oracle_policy
from critics.llm_critic import LLMCritic, parse_reply, render_prompt
from critics.repair import ERROR_SPAN, Repair, repair_failed, repair_injection
from critics.rule_critic import rule_critic
from critics.safety import SafetyCase, safety_cases
from critics.safety_pairs import safety_preference

__all__ = ["Critic", "Critique", "CritiqueRequest", "Injection", "inject_error",
           "evaluate_irr", "oracle_policy", "LLMCritic", "parse_reply", "render_prompt",
           "ERROR_SPAN", "Repair", "repair_failed", "repair_injection", "rule_critic",
           "SafetyCase", "safety_cases", "safety_preference"]
