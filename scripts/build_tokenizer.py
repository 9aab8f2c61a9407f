"""Build a tiny byte-level BPE tokenizer from generated trajectories (nothing can be
downloaded here): Qwen2.5's special tokens and tool markers as added tokens, the Qwen2.5 tool
chat template, a vocabulary of a few thousand.

    python scripts/build_tokenizer.py --shards OUT --out runs/tokenizer --vocab-size 8000 --pretokenizer lines

`--shards` takes a trajectories directory, an OUT root holding one, or a single Parquet file;
only the `text` column is read.

`--pretokenizer` decides where merges may not cross:
- `words` (GPT-2's regex, as Qwen2.5 and datagen.tokenizer do): every word, number and
  punctuation run is tokenised alone. The JSON tool specs of the system prompt stay
  2-4k tokens whatever the vocabulary (4k vocab: 2,519 tokens per demo trajectory on
  average, 16k: 2,502; 73% of them PROMPT).
- `lines`: only newlines are boundaries (each is a token of its own, so a turn always
  starts on a token boundary and the chat template's segments tokenise the same alone as
  in a whole text). Lines that recur in every task (a tool spec, a template sentence)
  become single tokens: 538 tokens per demo trajectory at 4k, 354 at 8k, 285 at 16k.
  The price: the tokenizer is specialised to the environments it was trained on (a new
  tool spec falls apart into short pieces) and a frequent call can be one token, so the
  model sees both whole calls and their pieces.
- `lines_digits`: `lines`, and every digit a token of its own (as Qwen2.5 splits numbers),
  so a number is spelled the same way in the request and in the call that copies it
  (README, "DPO before/after, measured": the `lines` student wrote memorised names).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from datagen.tokenizer import PRETOKENIZERS, build_bpe_tokenizer  # noqa: E402


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
    parser.add_argument("--pretokenizer", choices=PRETOKENIZERS, default="words",
                        help="words: merges stop at spaces and punctuation (GPT-2 regex); "
                             "lines: only at newlines (much shorter sequences; see above); "
                             "lines_digits: lines, and every digit alone")
    parser.add_argument("--max-texts", type=int, default=None,
                        help="train on at most this many trajectories (default: all)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    texts = shard_texts(args.shards, args.max_texts)
    if not texts:
        print(f"no text found under {args.shards}", file=sys.stderr)
        return 1
    tokenizer = build_bpe_tokenizer(texts, vocab_size=args.vocab_size, out_dir=args.out,
                                    pretokenizer=args.pretokenizer)
    print(f"tokenizer with {len(tokenizer)} tokens from {len(texts)} trajectories "
          f"-> {args.out} ({time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
