"""Reinforcement learning on function-call correctness (the `ppo` recipe's library).

    rewards.py     episode and per-call rewards from the env checker, the parser and
                   mutators.validate, per error class, each component kept apart
    advantages.py  GAE over generated tokens, group baselines (GRPO / RLOO), whitening
    losses.py      clipped surrogate, clipped value loss, KL estimators (k1, k3), entropy
    value_head.py  the critic's head on the policy's hidden states, saved beside a checkpoint
    rollout.py     rollout actors: the policy plays tasks through datagen's episode loop
    batches.py     trajectories -> token tensors (generated-token mask, turn ends, rewards)
"""
