"""Build a tiny, randomly initialised Qwen2 model and its tokenizer in one directory.

Nothing can be downloaded here, so the LLM-teacher tests and demos use a model the project builds
itself: a byte-level BPE trained on oracle trajectories (Qwen2.5 special tokens, tool markers and
chat template included) and a Qwen2 with hidden size 128, 2 heads of dimension 64 (vLLM's CPU
attention rejects head_dim 16) and 2 layers, saved with `save_pretrained`. The directory loads
with `AutoModelForCausalLM`, `AutoTokenizer` and vLLM alike. It generates noise, which is what
the tests want: every kind of malformed turn, with real token ids and real logprobs.

    python scripts/make_tiny_model.py --out runs/tiny-qwen2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo


def oracle_texts(count: int, envs: tuple[str, ...] | None = None) -> list[str]:
    """Rendered oracle trajectories (of the default environments unless `envs`): the
    tokenizer's training text."""
    from datagen.chat import render_trajectory
    from datagen.config import GenerateConfig
    from datagen.envs import DEFAULT_ENVS
    from datagen.pipeline.chunk import task_source
    from datagen.teachers import EnvPool, OracleTeacher

    config = GenerateConfig(num_trajectories=count,
                            envs=[{"name": name} for name in envs or DEFAULT_ENVS])
    pool = EnvPool()
    tasks = task_source(config).generate(0, count, pool)
    return [render_trajectory(traj)[0] for traj in OracleTeacher().rollout_batch(tasks, pool)]


def make_tiny_model(out: str | Path, vocab_size: int = 1000, texts: int = 60,
                    max_positions: int = 8192, seed: int = 0) -> Path:
    """Write tokenizer + random Qwen2 to `out`; returns the directory."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from datagen.tokenizer import build_bpe_tokenizer

    out = Path(out)
    tokenizer = build_bpe_tokenizer(oracle_texts(texts), vocab_size=vocab_size, out_dir=out)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=im_end, pad_token_id=pad, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad)
    model.save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out = make_tiny_model(args.out, vocab_size=args.vocab_size, seed=args.seed)
    print(f"tiny Qwen2 + tokenizer -> {out} ({time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
