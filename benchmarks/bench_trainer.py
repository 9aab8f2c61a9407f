"""Trainer benchmarks (a script, not a test; prints tables):

1. step time of SAD vs plain cross-entropy on the same batches: the same tiny model and
   batch, forward + backward, interleaved repetitions, median. Rows: plain CE (Transformers'
   own loss over full logits), SAD with a one-hot teacher (span-weighted CE), SAD with a
   stored top-k teacher, token-level KD, and SAD with chunk recomputation forced on (what
   runs at 32B scale, where the full logits would not fit). Target: SAD adds < 10%.
2. landmark attention vs sequence length (1k-16k at tiny size): CPU time per token and peak
   memory of one grouped-softmax attention call (forward, and forward+backward), and of a
   whole tiny-model forward (landmark vs causal SDPA).
3. step time of DPO vs SAD on the same tokens: the batch's rows read as pairs (rows 0..P-1
   chosen, P..2P-1 rejected, the last `--completion` tokens of each row the completion),
   the same model with split embeddings and MCH on; SAD one-hot over the same rows, DPO
   with a frozen reference (its forward each step) and with precomputed reference
   log-probs (the policy's forward + backward only).

    python benchmarks/bench_trainer.py                   # all, ~5-10 minutes on 2 CPUs
    python benchmarks/bench_trainer.py --only sad --threads 1
    python benchmarks/bench_trainer.py --only landmark --lengths 1024 4096 16384
    python benchmarks/bench_trainer.py --only dpo --threads 1
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
import torch  # noqa: E402

from trainer.losses import LossSettings, TeacherSignal, balanced_mch_loss, make_loss_fn  # noqa: E402
from trainer.model import build_model, tiny  # noqa: E402
from trainer.model.landmark import grouped_softmax_attention  # noqa: E402
from trainer.preference_loss import PreferenceSettings, make_preference_loss_fn, \
    sequence_logps_fn  # noqa: E402


def agent_batch(batch: int, length: int, vocab: int, k: int = 8, seed: int = 0) -> dict:
    """PROMPT quarter then REASON/ACT/OBS segments, like a rendered trajectory."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (batch, length), generator=g)
    spans = torch.zeros(batch, length, dtype=torch.long)
    position = length // 4
    while position < length:
        for kind, size in ((1, 60), (2, 40), (3, 50)):
            spans[:, position:position + size] = kind
            position += size
    topk_ids = torch.randint(0, vocab, (batch, length, k), generator=g)
    logprobs = torch.log_softmax(torch.randn(batch, length, k + 1, generator=g), -1)[..., :k]
    present = (spans == 1) | (spans == 2)
    return {"input_ids": ids, "span_ids": spans, "topk": TeacherSignal(
        "topk", topk_ids=topk_ids, topk_logprobs=logprobs, topk_present=present)}


def bench_sad(args: argparse.Namespace) -> None:
    model = build_model(tiny(vocab_size=args.vocab)).train()
    batch = agent_batch(args.batch, args.seq_len, args.vocab)
    ids, spans = batch["input_ids"], batch["span_ids"]

    def plain_ce() -> torch.Tensor:
        return model(input_ids=ids, labels=ids).loss

    def sad(teacher: TeacherSignal, objective: str = "sad", recompute: bool | None = None):
        settings = LossSettings(objective, chunk_size=512, recompute=recompute)
        return lambda: model(input_ids=ids, span_ids=spans,
                             loss_fn=make_loss_fn(ids, spans, teacher, settings)).loss

    variants = {"plain CE (HF loss, full logits)": plain_ce,
                "SAD, one-hot teacher": sad(TeacherSignal()),
                "SAD, stored top-8 teacher": sad(batch["topk"]),
                "token-level KD, top-8": sad(batch["topk"], "token_kd"),
                "SAD, one-hot, recompute chunks": sad(TeacherSignal(), recompute=True)}
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.repeats + 1):  # first round warms up
        for name, loss_fn in variants.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            loss_fn().backward()
            model.zero_grad(set_to_none=True)
            if repeat:
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
    base = "plain CE (HF loss, full logits)"
    base_wall, base_cpu = statistics.median(wall[base]), statistics.median(cpu[base])
    tokens = args.batch * args.seq_len
    print(f"\nSAD vs plain CE: tiny model ({sum(p.numel() for p in model.parameters())/1e6:.2f}M params, "
          f"vocab {args.vocab}), batch {args.batch} x {args.seq_len}, forward+backward, "
          f"{torch.get_num_threads()} thread(s), median of {args.repeats} interleaved rounds")
    print("  CPU = this process's CPU time per step (robust when other jobs share the cores)")
    print(f"{'variant':<34}{'wall (s)':>10}{'vs CE':>9}{'CPU (s)':>10}{'vs CE':>9}{'tokens/CPU-s':>14}")
    for name in variants:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:<34}{w:>10.3f}{w / base_wall - 1:>+9.1%}{c:>10.3f}{c / base_cpu - 1:>+9.1%}"
              f"{tokens / c:>14.0f}")


def _interleaved(variants: dict, repeats: int, model: torch.nn.Module,
                 ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds of each variant's step (a callable that runs forward and
    backward), interleaved round by round; the first round warms up."""
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(repeats + 1):
        for name, step in variants.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            step()
            model.zero_grad(set_to_none=True)
            if repeat:
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
    return wall, cpu


def bench_dpo(args: argparse.Namespace) -> None:
    if args.batch % 2:
        raise SystemExit("--batch must be even for DPO (chosen and rejected rows)")
    config = tiny(vocab_size=args.vocab, split_embeddings=True, use_mch=True,
                  tool_call_start_id=5, im_end_id=6)
    model = build_model(config).train()
    reference = build_model(config).eval().requires_grad_(False)
    batch = agent_batch(args.batch, args.seq_len, args.vocab)
    ids, spans = batch["input_ids"], batch["span_ids"]
    completion = torch.zeros_like(ids, dtype=torch.bool)
    completion[:, -args.completion:] = True
    pairs = args.batch // 2
    mch_positions = torch.full((args.batch, 1), args.seq_len - 1)
    mch_labels = torch.tensor([[1]] * pairs + [[0]] * pairs)
    settings = PreferenceSettings(chunk_size=512)
    stored = [torch.randn(pairs), torch.randn(pairs)]

    def sad() -> None:
        loss_fn = make_loss_fn(ids, spans, TeacherSignal(), LossSettings("sad", chunk_size=512))
        model(input_ids=ids, span_ids=spans, loss_fn=loss_fn).loss.backward()

    def dpo(frozen: bool) -> None:
        ref = stored
        if frozen:
            with torch.no_grad():
                sums = reference(input_ids=ids, span_ids=spans,
                                 loss_fn=sequence_logps_fn(ids, completion, settings)).loss
            ref = [sums[:pairs], sums[pairs:]]
        loss_fn = make_preference_loss_fn(ids, completion, ref[0], ref[1], torch.ones(pairs),
                                          settings)
        model(input_ids=ids, span_ids=spans, loss_fn=loss_fn).loss.backward()

    def dpo_mch() -> None:
        loss_fn = make_preference_loss_fn(ids, completion, stored[0], stored[1],
                                          torch.ones(pairs), settings)
        out = model(input_ids=ids, span_ids=spans, loss_fn=loss_fn, mch_positions=mch_positions)
        (out.loss + 0.5 * balanced_mch_loss(out.mch_logits, mch_labels)[0]).backward()

    def dpo_anchored() -> None:  # dpo.anchor_weight: + a SAD backward on as many rows
        dpo(True)
        sad()

    variants = {"SAD, one-hot teacher": sad, "DPO, frozen reference": partial(dpo, True),
                "DPO, precomputed reference": partial(dpo, False),
                "DPO, precomputed + MCH": dpo_mch, "DPO, frozen + SAD anchor": dpo_anchored}
    wall, cpu = _interleaved(variants, args.repeats, model)
    base = "SAD, one-hot teacher"
    base_wall, base_cpu = statistics.median(wall[base]), statistics.median(cpu[base])
    print(f"\nDPO vs SAD on the same tokens: tiny model with split embeddings + MCH "
          f"({sum(p.numel() for p in model.parameters())/1e6:.2f}M params, vocab {args.vocab}), "
          f"{pairs} pairs = {args.batch} rows x {args.seq_len} tokens (completion: last "
          f"{args.completion}), {torch.get_num_threads()} thread(s), median of {args.repeats} "
          f"interleaved rounds")
    print(f"{'variant':<30}{'wall (s)':>10}{'vs SAD':>9}{'CPU (s)':>10}{'vs SAD':>9}")
    for name in variants:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:<30}{w:>10.3f}{w / base_wall - 1:>+9.1%}{c:>10.3f}{c / base_cpu - 1:>+9.1%}")


class PeakRSS:
    """Peak resident memory of this process while the block runs (sampled every 5 ms)."""

    def __enter__(self) -> "PeakRSS":
        self.process, self.peak, self.running = psutil.Process(), 0, True
        self.start = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def _attention_fwd_bwd(q, k, v, block: int, scale: float) -> None:
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    with torch.enable_grad():
        grouped_softmax_attention(q, k, v, block, scale, 1024).sum().backward()


def bench_landmark(args: argparse.Namespace) -> None:
    heads, dim, block = 2, 64, 64
    print(f"\nLandmark attention vs sequence length (tiny: {heads} heads x {dim}, block {block}, "
          f"query chunk 1024; {torch.get_num_threads()} thread(s); best of {args.landmark_repeats})")
    print("  attn = one grouped-softmax call; +bwd = forward and backward (chunks recomputed); "
          "model = tiny 2-layer model forward with landmarks; causal = the same model with SDPA "
          "causal attention. ms = CPU ms per token; MB = peak RSS growth; full-matrix MB = one "
          "unchunked [heads, T', T'] fp32 score tensor")
    print(f"{'tokens':>7}{'attn ms':>9}{'MB':>6}{'+bwd ms':>9}{'MB':>6}{'full-matrix MB':>16}"
          f"{'model ms':>10}{'MB':>6}{'causal ms':>11}{'MB':>6}")
    landmark_model = build_model(tiny(vocab_size=args.vocab, use_landmark=True)).eval()
    causal_model = build_model(tiny(vocab_size=args.vocab)).eval()
    for length in args.lengths:
        expanded = length + length // block
        q, k, v = (torch.randn(1, heads, expanded, dim) for _ in range(3))
        ids = torch.randint(0, args.vocab, (1, length))
        runs = [partial(grouped_softmax_attention, q, k, v, block, dim ** -0.5, 1024),
                partial(_attention_fwd_bwd, q, k, v, block, dim ** -0.5),
                partial(landmark_model, input_ids=ids, logits_to_keep=1),
                partial(causal_model, input_ids=ids, logits_to_keep=1)]
        results = [[measure(run) for _ in range(args.landmark_repeats)] for run in runs]
        row = [value for samples in results for value in
               (min(s for s, _ in samples) / length * 1e3, max(m for _, m in samples))]
        full_mb = heads * expanded * expanded * 4 / 2**20
        print(f"{length:>7}{row[0]:>9.3f}{row[1]:>6.0f}{row[2]:>9.3f}{row[3]:>6.0f}{full_mb:>16.0f}"
              f"{row[4]:>10.3f}{row[5]:>6.0f}{row[6]:>11.3f}{row[7]:>6.0f}")


def measure(run) -> tuple[float, float]:
    """CPU seconds and peak extra resident MB of one call of `run` (no gradients unless
    `run` enables them)."""
    gc.collect()
    with torch.no_grad(), PeakRSS() as memory:
        started = time.process_time()
        run()
        seconds = time.process_time() - started
    return seconds, memory.extra_mb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["sad", "landmark", "dpo"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--completion", type=int, default=128,
                        help="DPO: completion tokens at the end of each row")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--landmark-repeats", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.only in (None, "sad"):
        bench_sad(args)
    if args.only in (None, "landmark"):
        bench_landmark(args)
    if args.only in (None, "dpo"):
        bench_dpo(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
