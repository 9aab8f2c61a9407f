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
- `values`: a run of value characters (letters, digits, `_./~@+-`; a path, an id, a name),
  a run of other punctuation and a run of spaces are each bounded, tool spec lines are kept
  whole: every argument value the call copies is spelled with the same tokens as where the
  context has it, so a student can copy it token by token. ~1,020 tokens per demo
  trajectory at 8k (`lines`: 354). Measured with the tiny walk-through (README, "## Trainer"):
  it copies less than `lines` at 2,000 steps (0.07 against 0.14-0.18), so `lines` stays.

The build prints tokens per trajectory and `spelled alike`: of the argument values a call
copies from its context (string values of 3+ characters found there), the share whose tokens
in the call start and end at the value's edges and occur in that order in the context
(demo, 8k: `lines` 0.16, `values` 0.98).
"""

from __future__ import annotations

import argparse
import json
import sys
from bisect import bisect_left
import time
from pathlib import Path

import pyarrow.dataset as pads

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from datagen.tokenizer import PRETOKENIZERS, build_bpe_tokenizer  # noqa: E402
from trainer.contract import IM_START, TOOL_CALL_CLOSE, TOOL_CALL_OPEN  # noqa: E402
from trainer.step_eval import leaves, value_kind  # noqa: E402

CALL_OPEN, CALL_CLOSE = f"{TOOL_CALL_OPEN}\n", f"\n{TOOL_CALL_CLOSE}"
CONVERSATION_START = f"{IM_START}user"  # values are looked for after the system prompt


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


def _contains(haystack: list[int], needle: list[int]) -> bool:
    size = len(needle)
    return any(haystack[i:i + size] == needle for i in range(len(haystack) - size + 1))


def call_bodies(text: str):
    """(start, end) of the JSON of each closed tool call of `text`, in order. Linear in the
    text: after an open marker without a close nothing later can close either."""
    at = text.find(CALL_OPEN)
    while at >= 0:
        body = at + len(CALL_OPEN)
        close = text.find(CALL_CLOSE, body)
        if close < 0:
            return
        yield body, close
        at = text.find(CALL_OPEN, close + len(CALL_CLOSE))


def copied_values(text: str):
    """(value, its start in the call, the call's start) for each string argument value of 3+
    characters that a call of `text` repeats from the conversation before it."""
    conversation = max(text.find(CONVERSATION_START), 0)
    for body, end in call_bodies(text):
        try:
            call = json.loads(text[body:end])
        except ValueError:
            continue
        arguments = call.get("arguments") if isinstance(call, dict) else None
        for _, value in leaves(arguments or {}):
            if value_kind(value) != "text":  # the step eval's copyable strings
                continue
            written = json.dumps(value, ensure_ascii=False)[1:-1]
            at = text.find(written, body, end)
            call_start = body - len(CALL_OPEN)
            if written == value and at >= 0 and value in text[conversation:call_start]:
                yield value, at, call_start


def spelling_report(tokenizer, texts: list[str]) -> dict[str, float]:
    """Tokens per text, and the share of copied argument values spelled alike: the call's
    tokens over the value start and end at its edges and occur in the context before it."""
    copied = alike = tokens = 0
    for text in texts:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
        tokens += len(ids)
        starts = [a for a, _ in offsets]  # non-decreasing
        for value, start, call_start in copied_values(text):
            end = start + len(value)
            inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
            context = ids[:bisect_left(starts, call_start)]  # the tokens before the call
            copied += 1
            alike += (offsets[inside[0]][0] == start and offsets[inside[-1]][1] == end and
                      _contains(context, [ids[i] for i in inside]))
    return {"tokens_per_text": tokens / max(len(texts), 1), "copied_values": copied,
            "spelled_alike": alike / copied if copied else float("nan")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="trajectories dir, OUT root or file")
    parser.add_argument("--out", required=True, help="tokenizer directory to write")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--pretokenizer", choices=PRETOKENIZERS, default="words",
                        help="words: merges stop at spaces and punctuation (GPT-2 regex); "
                             "lines: only at newlines (much shorter sequences; see above); "
                             "lines_digits: lines, and every digit alone; values: a value's "
                             "characters are bounded from everything around them")
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
    report = spelling_report(tokenizer, texts[:500])
    print(f"tokenizer with {len(tokenizer)} tokens from {len(texts)} trajectories "
          f"-> {args.out} ({time.perf_counter() - started:.1f}s); on {min(len(texts), 500)} of "
          f"them: {report['tokens_per_text']:.0f} tokens per trajectory, "
          f"{report['spelled_alike']:.2f} of {report['copied_values']} copied argument "
          "values spelled alike in the call and its context")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
