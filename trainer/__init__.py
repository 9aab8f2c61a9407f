"""trainer: the modified Qwen2.5 and the Structured Agent Distillation training job.

    trainer.model      AgentQwen2ForCausalLM: split embeddings, landmark attention, MCH
    trainer.losses     SAD (span-level KD) and the token-KD / SFT baselines, chunked
    trainer.data       Ray Data stream from the Parquet shards (the only data contract)
    trainer.fit        `python -m trainer fit`: Ray Train TorchTrainer (DDP or DeepSpeed)
    trainer.eval       `python -m trainer eval`: a checkpoint on held-out tasks (trainer.heldout):
                       step-level metrics (trainer.step_eval), episodes through datagen's hf
                       teacher (trainer.agent_backend, trainer.generation), IRR

Training reads the shards through the data contract only and never imports the generation
side (datagen, mutators, critics); evaluation is where the two meet: it plays episodes with
datagen's teacher machinery. Importing `trainer` itself loads nothing heavy.
"""
