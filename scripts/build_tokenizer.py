"""Build a tiny byte-level BPE tokenizer from generated trajectories (nothing can be
downloaded here): Qwen2.5's special tokens and tool markers as added tokens, the Qwen2.5 tool
chat template, a vocabulary of a few thousand.

    python scripts/build_tokenizer.py --shards OUT/trajectories --out runs/tokenizer --vocab-size 4000

`--shards` takes a trajectories directory, an OUT root holding one, or a single Parquet file;
only the `text` column is read.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from datagen.tokenizer import build_bpe_tokenizer  # noqa: E402


def shard_texts(shards: str | Path, max_texts: int | None = None) -> list[str]:
    """The `text` column of the trajectory shards (at most `max_texts` rows)."""
    path = Path(shards)
    if path.is_dir() and (path / "trajectories").is_dir():
        path = path / "trajectories"
    dataset = pads.dataset(str(path), format="parquet")
    texts: list[str] = []
    for batch in dataset.to_batches(columns=["text"]):
        texts.extend(text for text in batch.column(0).to_pylist() if text)
        if max_texts is not None and len(texts) >= max_texts:
            return texts[:max_texts]
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="trajectories dir, OUT root or file")
    parser.add_argument("--out", required=True, help="tokenizer directory to write")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--max-texts", type=int, default=None,
                        help="train on at most this many trajectories (default: all)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    texts = shard_texts(args.shards, args.max_texts)
    if not texts:
        print(f"no text found under {args.shards}", file=sys.stderr)
        return 1
    tokenizer = build_bpe_tokenizer(texts, vocab_size=args.vocab_size, out_dir=args.out)
    print(f"tokenizer with {len(tokenizer)} tokens from {len(texts)} trajectories "
          f"-> {args.out} ({time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
