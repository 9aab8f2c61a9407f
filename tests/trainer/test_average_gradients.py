"""trainer.engines.average_gradients over two gloo processes: the mean of the ranks'
gradients on every rank, a rank without a gradient counting as zeros (PCGrad and the DPO
anchor run their backward passes without DDP's hooks and reduce with it once)."""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.engines import average_gradients


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(rank: int, port: int, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        both, only_rank_1 = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
        both.grad = torch.full((3,), float(rank + 1))      # 1 and 2: mean 1.5
        if rank == 1:
            only_rank_1.grad = torch.full((2,), 4.0)       # None on rank 0: mean 2
        average_gradients([both, only_rank_1])
        results[rank] = (both.grad.tolist(), only_rank_1.grad.tolist())
    finally:
        dist.destroy_process_group()


def test_gradients_are_averaged_over_ranks_with_missing_ones_as_zeros():
    results = mp.Manager().dict()
    mp.spawn(_rank, args=(_free_port(), results), nprocs=2, join=True)
    assert results[0] == results[1] == ([1.5, 1.5, 1.5], [2.0, 2.0])
