"""The weight gate (no vLLM): a swap waits for the turns in flight, holds new ones back and
counts versions; it is bounded, and the gate reopens whatever the load does. Also the checks
that refuse weights before an engine is touched."""

from __future__ import annotations

import asyncio

import pytest
import torch
from safetensors.torch import save_file

from datagen.teachers.weight_gate import SwapTimeout, WeightGate


async def _turn(gate: WeightGate, log: list, name: str, hold: asyncio.Event | None = None):
    async with gate.turn() as version:
        log.append(("enter", name, version))
        if hold is not None:
            await hold.wait()
        log.append(("leave", name, version))
    return version


def test_a_swap_drains_the_turns_in_flight_and_holds_new_ones_back():
    async def scenario():
        gate, log, hold = WeightGate(), [], asyncio.Event()
        old = [asyncio.create_task(_turn(gate, log, f"old{i}", hold)) for i in range(3)]
        await asyncio.sleep(0)
        assert gate.in_flight == 3

        async def load(seconds_left: float) -> str:
            log.append(("load", gate.in_flight, gate.version))
            return "loaded"

        swap = asyncio.create_task(gate.swap(load, timeout_s=5))
        await asyncio.sleep(0)
        assert gate.swapping
        new = [asyncio.create_task(_turn(gate, log, f"new{i}")) for i in range(2)]
        await asyncio.sleep(0.01)
        assert gate.waiting == 2 and not any(t.done() for t in new), "new turns wait"
        assert ("load", 0, 0) not in log, "no load while turns are in flight"
        hold.set()
        assert await swap == "loaded" and gate.version == 1 and not gate.swapping
        assert [await t for t in old] == [0, 0, 0] and [await t for t in new] == [1, 1]
        load_at = log.index(("load", 0, 0))
        assert all(e[0] != "enter" or e[2] == 1 for e in log[load_at:])
        assert all(e[2] == 0 for e in log[:load_at])

    asyncio.run(scenario())


def test_a_swap_that_cannot_drain_in_time_loads_nothing_and_reopens():
    async def scenario():
        gate, log, hold = WeightGate(), [], asyncio.Event()
        stuck = asyncio.create_task(_turn(gate, log, "stuck", hold))
        await asyncio.sleep(0)
        loads = []
        with pytest.raises(SwapTimeout, match="1 turn.* still in the engine"):
            await gate.swap(lambda left: asyncio.sleep(0, loads.append(left)), timeout_s=0.05)
        assert loads == [] and gate.version == 0 and not gate.swapping
        assert await _turn(gate, log, "after") == 0, "the gate is open again"
        hold.set()
        assert await stuck == 0

    asyncio.run(scenario())


def test_a_failed_load_reopens_the_gate_and_keeps_the_version():
    async def scenario():
        gate = WeightGate()

        async def failing(seconds_left: float) -> None:
            raise RuntimeError("disk gone")

        with pytest.raises(RuntimeError, match="disk gone"):
            await gate.swap(failing, timeout_s=1)
        assert gate.version == 0 and not gate.swapping
        assert await _turn(gate, [], "after") == 0

    asyncio.run(scenario())


def test_swaps_run_one_at_a_time_and_each_counts():
    async def scenario():
        gate, active, peak = WeightGate(), [0], [0]

        async def load(seconds_left: float) -> int:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.01)
            active[0] -= 1
            return gate.version

        seen = await asyncio.gather(*(gate.swap(load, timeout_s=1) for _ in range(3)))
        assert sorted(seen) == [0, 1, 2] and gate.version == 3 and peak[0] == 1

    asyncio.run(scenario())


def test_the_timeout_left_for_the_load_is_what_the_drain_did_not_use():
    async def scenario():
        gate, hold = WeightGate(), asyncio.Event()
        turn = asyncio.create_task(_turn(gate, [], "t", hold))
        await asyncio.sleep(0)
        asyncio.get_running_loop().call_later(0.2, hold.set)
        left = await gate.swap(lambda seconds_left: asyncio.sleep(0, seconds_left), 1.0)
        assert 0.5 < left < 0.85 and 0.15 < gate.last_drain_s < 0.5
        assert abs(left + gate.last_drain_s - 1.0) < 0.05
        await turn

    asyncio.run(scenario())


# --- the checks before a swap (datagen/teachers/vllm_weights.py) ---

SERVED = {"model.embed_tokens.weight": (10, 4), "model.norm.weight": (4,),
          "lm_head.weight": (10, 4)}


def test_weights_that_do_not_fit_are_refused_naming_the_problem():
    from datagen.teachers.vllm_weights import WeightsRejected, check_fits

    check_fits("ok", dict(SERVED), SERVED, tied=True)
    for shapes, reason in [
            ({k: v for k, v in SERVED.items() if k != "model.norm.weight"}, "missing: model.norm"),
            ({**SERVED, "model.extra": (1,)}, "not in the served model: model.extra"),
            ({**SERVED, "model.norm.weight": (5,)}, r"misshapen: model.norm.weight \(5,\)"),
            ({k: v for k, v in SERVED.items() if k != "lm_head.weight"}, "has no lm_head")]:
        with pytest.raises(WeightsRejected, match=reason):
            check_fits("new", shapes, SERVED, tied=True)
    check_fits("hub model", {"anything": (1,), "lm_head.weight": (2,)}, None, tied=True)


def test_a_directory_is_read_from_its_headers_and_unreadable_ones_are_refused(tmp_path):
    from datagen.teachers.vllm_weights import WeightsRejected, checkpoint_shapes

    with pytest.raises(WeightsRejected, match="is not a directory"):
        checkpoint_shapes(tmp_path / "missing")
    with pytest.raises(WeightsRejected, match="no \\*.safetensors"):
        checkpoint_shapes(tmp_path)
    save_file({"a": torch.zeros(2, 3)}, str(tmp_path / "one.safetensors"))
    save_file({"b": torch.zeros(5)}, str(tmp_path / "two.safetensors"))
    assert checkpoint_shapes(tmp_path) == {"a": (2, 3), "b": (5,)}
    data = (tmp_path / "two.safetensors").read_bytes()
    (tmp_path / "two.safetensors").write_bytes(data[:-4])  # a half-written file
    with pytest.raises(WeightsRejected, match="two.safetensors is not a readable"):
        checkpoint_shapes(tmp_path)


def test_turn_versions_reach_the_trajectory_meta():
    from datagen.teachers.episode import Generation, Tally, TurnRequest

    tally = Tally()
    request = TurnRequest(messages=[], prompt_ids=[1, 2], tools=[], max_tokens=4, key="k")
    for version in (0, 0, 1):
        tally.add(Generation(text="x", weights_version=version), request)
    assert tally.weights_versions == [0, 0, 1]
    tally_without = Tally()
    tally_without.add(Generation(text="x"), request)
    assert tally_without.weights_versions == []


class _RecordingEngine:
    """The four AsyncLLM calls a reload makes, recorded; `stall` or `fail` one of them."""

    def __init__(self, stall: str = "", fail: str = "") -> None:
        self.calls: list[str] = []
        self.stall, self.fail = stall, fail

    async def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.stall:
            await asyncio.sleep(10)
        if name == self.fail:
            raise RuntimeError(f"{name} broke")

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        assert mode == "wait"
        await self._call("pause")

    async def collective_rpc(self, method: str, kwargs: dict) -> None:
        await self._call(method)

    async def reset_prefix_cache(self) -> None:
        await self._call("reset_prefix_cache")

    async def resume_generation(self) -> None:
        await self._call("resume")


@pytest.mark.parametrize("stall, fail, raised, calls", [
    ("", "", None, ["pause", "reload_weights", "reset_prefix_cache", "resume"]),
    ("pause", "", "SwapTimeout", ["pause", "resume"]),
    ("", "reload_weights", "WeightLoadFailed", ["pause", "reload_weights", "resume"]),
    ("", "reset_prefix_cache", "WeightLoadFailed",
     ["pause", "reload_weights", "reset_prefix_cache", "resume"]),
    ("", "pause", "RuntimeError", ["pause", "resume"]),
])
def test_a_reload_always_resumes_the_engine(tmp_path, stall, fail, raised, calls):
    from datagen.teachers.vllm_weights import reload_paused

    engine = _RecordingEngine(stall, fail)
    if raised is None:
        asyncio.run(reload_paused(engine, tmp_path, timeout_s=0.2))
    else:
        with pytest.raises(Exception) as caught:
            asyncio.run(reload_paused(engine, tmp_path, timeout_s=0.2))
        assert type(caught.value).__name__ == raised
    assert engine.calls == calls
