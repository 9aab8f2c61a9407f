"""Build a small byte-level BPE tokenizer with Qwen2.5's special tokens and chat template.

Nothing can be downloaded here, so tests and tiny end-to-end runs train their own tokenizer on
generated text. The result is a regular `PreTrainedTokenizerFast` directory that
`AutoTokenizer.from_pretrained` (and vLLM) load, with the Qwen2.5 tool-calling template set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

QWEN_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Tool-call markers are ordinary text in Qwen2.5's vocabulary too (added tokens there); adding
# them keeps the ACT boundary a single token, which the trainer's mode switch relies on.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TEMPLATE_PATH = Path(__file__).parent / "templates" / "qwen2_5_tools.jinja"


def chat_template() -> str:
    return TEMPLATE_PATH.read_text()


PRETOKENIZERS = ("words", "lines", "lines_digits", "values")

# `values`: what an argument value is made of (paths, ids, names, numbers, file names). A run
# of these characters is one pre-token, so a value is cut into the same tokens wherever it
# stands: a run never ends in a dot (the full stop after `ops.md.` is not part of the name).
_VALUE_CHARS = r"A-Za-z0-9_./~@+\-"
_VALUE_RUN = rf"[{_VALUE_CHARS}]*[A-Za-z0-9_/~@+\-]"
# A tool spec line of the Qwen2.5 template's system prompt, the same in every task: kept whole
# (as `lines` does), so the specs stay a few tokens each.
_TOOL_SPEC_LINE = r'\{"type": "function"[^\n]*'
# A run of dots that no value character ends is matched whole (the pieces are the same as when
# it is left between matches): otherwise the value run is tried, and scans to the run's end, at
# every one of its dots, and 32k dots took 4 s to encode (quadratic), 320k would take minutes.
_VALUES_PATTERN = rf"{_TOOL_SPEC_LINE}|\n|{_VALUE_RUN}|\.+|[^{_VALUE_CHARS}\s]+| +"


def _pre_tokenizer(name: str):
    """`words`: GPT-2's regex (as Qwen2.5): merges stop at spaces and punctuation. `lines`:
    only newlines (each a token of its own) are boundaries (scripts/build_tokenizer.py).
    `lines_digits`: `lines`, and every digit a token of its own, as Qwen2.5 splits numbers: a
    number is spelled the same way wherever it appears, so copying one from the request is
    copying digit by digit (with `lines`, "scratch-417" is `-4`,`17` and "tmp_import_512" is
    `5`,`12`). `values`: a value (a run of letters, digits and `_./~@+-`, not ending in a dot),
    a run of other punctuation, a run of spaces and a newline are each a pre-token, and a tool
    spec line is one: a value is spelled with the same tokens in the request, an
    observation, the reasoning and the call (98% of the demo's copyable argument values,
    against 16% with `lines`, whose merges join a value to the quote, key or word beside it:
    `ops.m` + `d"`), at ~2.9x the tokens per trajectory."""
    from tokenizers import Regex, pre_tokenizers

    if name == "words":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if name in ("lines", "lines_digits"):
        digits = [pre_tokenizers.Digits(individual_digits=True)] if name == "lines_digits" else []
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"), *digits,
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if name == "values":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_VALUES_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise ValueError(f"unknown pre-tokenizer {name!r}; allowed: {', '.join(PRETOKENIZERS)}")


def build_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 2000,
                        out_dir: str | Path | None = None, pretokenizer: str = "words"):
    """Train a byte-level BPE on `texts` (merges bounded as `pretokenizer` says); save to
    `out_dir` when given. Returns the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = _pre_tokenizer(pretokenizer)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                  special_tokens=QWEN_SPECIAL_TOKENS + TOOL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", unk_token=None)
    tokenizer.chat_template = chat_template()
    if out_dir is not None:
        tokenizer.save_pretrained(str(out_dir))
    return tokenizer
