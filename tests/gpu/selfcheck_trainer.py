"""GPU self-check of the trainer: a randomly initialised 1.5B-class modified Qwen2.5 takes
SAD steps under DeepSpeed ZeRO-3 (bf16) on one GPU; prints tokens/s, MFU and peak memory,
and exits non-zero when a check fails. Standalone: torch, transformers, deepspeed and this
repository's trainer.model / trainer.losses; no Ray, no downloads. About 3-5 minutes on one
H100/H200 (two 1.5B models are built, ~20 steps each).

    python tests/gpu/selfcheck_trainer.py
    DS_ACCELERATOR=cpu python tests/gpu/selfcheck_trainer.py --device cpu --shape tiny --steps 3

Phases: (1) split embeddings + MCH with the default (SDPA/flash) attention, stored top-k
teacher (SAD path (a)); (2) the same with landmark attention (pure PyTorch grouped softmax).
Checks: every loss finite, the loss on a repeated batch falls, gradient norms finite, the
ZeRO-3 weights gather into a Hugging Face checkpoint that reloads with equal tensors.
Not collected by pytest (no test_ prefix); tests/trainer/test_selfcheck_cpu.py runs the CPU
smoke version when deepspeed is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from trainer.losses import LossSettings, TeacherSignal, make_loss_fn  # noqa: E402
from trainer.metrics import peak_flops, train_flops_per_token  # noqa: E402
from trainer.model import AgentQwen2ForCausalLM, qwen2_5_1_5b, tiny  # noqa: E402

TOOL_CALL, IM_END = 5, 6  # marker ids of the synthetic vocabulary


def synthetic_batch(batch: int, length: int, vocab: int, k: int, seed: int) -> dict:
    """Agent-shaped rows: a PROMPT quarter, then [REASON 60, ACT 40 (<tool_call> ...
    <|im_end|>), OBS 50] repeated; stored top-k teacher entries on REASON/ACT tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (batch, length), generator=g)
    spans = torch.zeros(batch, length, dtype=torch.long)
    position = length // 4
    while position < length:
        for kind, size in ((1, 60), (2, 40), (3, 50)):
            end = min(position + size, length)
            spans[:, position:end] = kind
            if kind == 2 and end - position > 2:
                ids[:, position], ids[:, end - 1] = TOOL_CALL, IM_END
            position = end
    topk_ids = torch.randint(0, vocab, (batch, length, k), generator=g)
    topk_ids[..., 0] = ids
    logprobs = torch.log_softmax(torch.randn(batch, length, k + 1, generator=g), -1)[..., :k]
    present = (spans == 1) | (spans == 2)
    mch_positions = torch.tensor([[length // 4 + 99, length // 4 + 249]] * batch)
    return {"input_ids": ids, "span_ids": spans, "topk_ids": topk_ids,
            "topk_logprobs": logprobs, "topk_present": present,
            "mch_positions": mch_positions.clamp(max=length - 1),
            "mch_labels": torch.tensor([[1, 0]] * batch)}


def ds_config(device: str, zero_stage: int, micro_batch: int) -> dict:
    config = json.loads((ROOT / "configs" / "train_qwen2_5_32b_zero3_deepspeed.json").read_text())
    config["zero_optimization"]["stage"] = zero_stage
    config["bf16"] = {"enabled": device == "cuda"}
    config.update(train_micro_batch_size_per_gpu=micro_batch, gradient_accumulation_steps=1,
                  gradient_clipping=1.0)
    if device == "cpu":  # small buckets: the CPU smoke model is tiny
        config["zero_optimization"].update(reduce_bucket_size=1e6, stage3_prefetch_bucket_size=1e6)
    return config


def build_model(shape: str, landmark: bool) -> AgentQwen2ForCausalLM:
    builder = qwen2_5_1_5b if shape == "1_5b" else tiny
    config = builder(vocab_size=32000 if shape == "1_5b" else 512, split_embeddings=True,
                     use_mch=True, use_landmark=landmark, tool_call_start_id=TOOL_CALL,
                     im_end_id=IM_END)
    torch.manual_seed(0)
    return AgentQwen2ForCausalLM(config)


def run_phase(name: str, args: argparse.Namespace, landmark: bool, failures: list[str]) -> dict:
    import deepspeed

    model = build_model(args.shape, landmark)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # torch's AdamW (fused on CUDA), as trainer.engines does: no DeepSpeed op compilation
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device == "cuda")
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           config=ds_config(args.device, args.zero_stage, args.batch))
    device = engine.device
    vocab = model.config.vocab_size
    batch = {k: v.to(device) for k, v in synthetic_batch(args.batch, args.seq_len, vocab, 20, 0).items()}
    settings = LossSettings("sad", chunk_size=1024)
    losses, times = [], []
    for step in range(args.steps + args.warmup):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        signal = TeacherSignal("topk", topk_ids=batch["topk_ids"], topk_logprobs=batch["topk_logprobs"],
                               topk_present=batch["topk_present"])
        out = engine(input_ids=batch["input_ids"], span_ids=batch["span_ids"],
                     loss_fn=make_loss_fn(batch["input_ids"], batch["span_ids"], signal, settings),
                     mch_positions=batch["mch_positions"])
        mch = torch.nn.functional.binary_cross_entropy_with_logits(
            out.mch_logits.float(), batch["mch_labels"].float())
        loss = out.loss + 0.5 * mch
        engine.backward(loss)
        engine.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
        losses.append(float(loss.detach()))
        norm = engine.get_global_grad_norm()
        if not torch.isfinite(loss) or (norm is not None and not torch.isfinite(torch.tensor(float(norm)))):
            failures.append(f"{name}: non-finite loss or gradient at step {step}")
    if not losses[-1] < losses[0]:
        failures.append(f"{name}: loss did not fall on a repeated batch ({losses[0]:.4f} -> {losses[-1]:.4f})")
    tokens = args.batch * args.seq_len
    tokens_per_s = tokens / (sum(times) / len(times))
    peak = peak_flops(device)
    flops = train_flops_per_token(model.config, args.seq_len)
    result = {"phase": name, "params_b": round(sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                                                   for p in model.parameters()) / 1e9, 3),
              "tokens_per_s": round(tokens_per_s, 1), "step_s": round(sum(times) / len(times), 4),
              "mfu": round(tokens_per_s * flops / peak, 4) if peak else None,
              "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
              "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None}
    if args.check_save and not landmark:
        check_hf_checkpoint(engine, model, failures)
    del engine
    return result


def check_hf_checkpoint(engine, model: AgentQwen2ForCausalLM, failures: list[str]) -> None:
    """Gather ZeRO-3 weights into a Hugging Face checkpoint and reload it on CPU."""
    state = engine._zero3_consolidated_16bit_state_dict() if engine.zero_optimization_stage() == 3 \
        else engine.module.state_dict()
    expected = dict(state)  # save_pretrained consumes the dict it is given
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, state_dict=state)
        reloaded = AgentQwen2ForCausalLM.from_pretrained(directory, dtype=torch.float32)
        for name in ("act_embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "mch.score.weight"):
            if not torch.equal(reloaded.state_dict()[name], expected[name].float().cpu()):
                failures.append(f"checkpoint: {name} differs after save/load")


def init_distributed(device: str) -> None:
    import deepspeed

    from trainer.engines import skip_cpu_shm_comm

    skip_cpu_shm_comm(1)  # this script runs one rank; a no-op on a GPU
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511")):
        os.environ.setdefault(key, value)
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", choices=["1_5b", "tiny"], default="1_5b")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--zero-stage", type=int, default=3)
    parser.add_argument("--skip-landmark", action="store_true")
    parser.add_argument("--no-check-save", dest="check_save", action="store_false")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("FAIL: no CUDA device", file=sys.stderr)
        return 1
    started = time.perf_counter()
    failures: list[str] = []
    results = []
    try:
        init_distributed(args.device)
        results.append(run_phase("split+mch, sdpa", args, landmark=False, failures=failures))
        if not args.skip_landmark:
            results.append(run_phase("split+mch+landmark", args, landmark=True, failures=failures))
    except Exception as exc:  # any crash is a failed check, reported as such
        import traceback

        traceback.print_exc()
        failures.append(f"crashed: {type(exc).__name__}: {exc}")
    print(f"\n{'phase':<22}{'params(B)':>10}{'tokens/s':>12}{'step(s)':>10}{'MFU':>8}{'loss':>18}{'mem(GB)':>9}")
    for r in results:
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(f"{r['phase']:<22}{r['params_b']:>10}{r['tokens_per_s']:>12}{r['step_s']:>10}{mfu:>8}"
              f"{r['loss_first']:>9}->{r['loss_last']:<8}{str(r['peak_mem_gb']):>9}")
    print(json.dumps({"results": results, "failures": failures,
                      "seconds": round(time.perf_counter() - started, 1)}))
    print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
