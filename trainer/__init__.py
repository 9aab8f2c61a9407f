"""trainer: the modified Qwen2.5 and its training chain (SAD -> DPO -> PPO), as recipes over
a library.

Recipes (trainer.recipes, chosen by `recipe:` in the config):
    trainer.recipes.sad    span-level distillation (SAD, token KD, SFT) on trajectories/repairs
    trainer.recipes.dpo    preference training (DPO, IPO, RPO) on preferences/ pairs
    trainer.recipes.ppo    RL in the environments: PPO with a value head, GRPO / RLOO

Library:
    trainer.contract       span ids, chat markers, columns, call text, chat spans: the one
                           copy of what the trainer agrees on with the shards
    trainer.model          AgentQwen2ForCausalLM: split embeddings, landmark attention, MCH
    trainer.losses         SAD (span-level KD) and the token-KD / SFT baselines, chunked
    trainer.preference_loss  DPO / IPO / RPO from the same chunked log-probabilities
    trainer.readers        one reader per table (trajectories, repairs, preferences)
    trainer.data           SAD's Ray Data stream; trainer.batching / collate / packing
    trainer.reference      DPO's reference: frozen copy or precomputed log-probs
    trainer.student, engines, checkpoints, metrics, distributed   shared by the recipes
    trainer.fit            `python -m trainer fit`: Ray Train TorchTrainer (DDP or DeepSpeed)
    trainer.retries        which failed fits Ray Train restarts: a lost worker, not bad data
                           or a divergence
    trainer.eval           `python -m trainer eval`: a checkpoint on held-out tasks (trainer.heldout):
                           step-level metrics (trainer.step_eval), episodes through datagen's hf
                           teacher (trainer.agent_backend, trainer.generation), IRR
    trainer.agent_backend  a checkpoint as datagen's registered `policy` teacher backend
    trainer.rl             PPO's library: rewards, advantages, losses, value head, rollouts

SAD and DPO read the shards through the data contract only and never import the generation
side (datagen, mutators, critics); evaluation and PPO's rollouts are where the two meet: they
play episodes with datagen's teacher machinery, the policy plugged in through datagen's
teacher-backend registry. Importing `trainer` itself loads nothing heavy.
"""
