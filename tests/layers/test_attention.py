"""F.scaled_dot_product_attention and nn.MultiheadAttention against PyTorch, exported by pnnx."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import check_model, check_op

sdpa = F.scaled_dot_product_attention
QKV = [(1, 2, 5, 4), (1, 2, 6, 4), (1, 2, 6, 3)]


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3}, {"scale": 2.0, "is_causal": True}],
                         ids=str)
def test_sdpa(kwargs, tmp_path):
    check_op(lambda q, k, v: sdpa(q, k, v, **kwargs), *QKV, directory=tmp_path, batch=3)


@pytest.mark.parametrize("target,source", [(5, 5), (7, 4), (1, 6)])
def test_sdpa_causal_is_aligned_top_left(target, source, tmp_path):
    check_op(lambda q, k, v: sdpa(q, k, v, is_causal=True), (1, 2, target, 4), (1, 2, source, 4),
             (1, 2, source, 4), directory=tmp_path)


@pytest.mark.parametrize("shapes", [[(1, 5, 4), (1, 6, 4), (1, 6, 3)], [(5, 4), (6, 4), (6, 3)],
                                    [(1, 3, 2, 5, 4), (1, 3, 2, 6, 4), (1, 3, 2, 6, 4)]], ids=str)
def test_sdpa_ranks(shapes, tmp_path):
    check_op(sdpa, *shapes, directory=tmp_path)


def test_sdpa_self_attention_same_operand(tmp_path):
    check_op(lambda x: sdpa(x, x, x), (1, 2, 5, 4), directory=tmp_path, batch=2)


@pytest.mark.parametrize("mask_shape", [(5, 6), (1, 1, 5, 6), (1, 2, 5, 6)], ids=str)
def test_sdpa_float_mask(mask_shape, tmp_path):
    check_op(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), *QKV, mask_shape, directory=tmp_path)


def test_sdpa_bool_mask(tmp_path):
    check_op(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m > 0), *QKV, (5, 6), directory=tmp_path)


class FullyMasked(nn.Module):
    """A bool mask that blocks every key of query 1: SDPA gives that query zeros."""

    def __init__(self):
        super().__init__()
        mask = torch.ones(5, 6, dtype=torch.bool)
        mask[1] = False
        mask[3, 2:] = False
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        return sdpa(q, k, v, attn_mask=self.mask)


def test_sdpa_fully_masked_query_gives_zeros(tmp_path):
    check_op(FullyMasked(), *QKV, directory=tmp_path, batch=2)


def test_sdpa_grouped_query_attention(tmp_path):
    check_op(lambda q, k, v: sdpa(q, k, v, enable_gqa=True), (1, 4, 5, 4), (1, 2, 6, 4), (1, 2, 6, 3),
             directory=tmp_path, batch=2)


class Attend(nn.Module):
    """nn.MultiheadAttention called on x (and y, z) as ``pattern`` says."""

    def __init__(self, pattern: str = "xxx", need_weights: bool = False, average: bool = True, **kwargs):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(**{"embed_dim": 8, "num_heads": 2, **kwargs})
        self.pattern, self.need_weights, self.average = pattern, need_weights, average
        with torch.no_grad():  # random biases (PyTorch starts them at zero)
            for name, p in self.mha.named_parameters():
                if "bias" in name:
                    p.normal_()

    def forward(self, *inputs):
        named = dict(zip("xyz", inputs))
        q, k, v = (named[c] for c in self.pattern)
        out = self.mha(q, k, v, need_weights=self.need_weights, average_attn_weights=self.average)
        return out if self.need_weights else out[0]


def _sequences(pattern: str, batch_first: bool, lengths=(5, 7, 7), dims=(8, 8, 8)) -> list[tuple[int, ...]]:
    """Input shapes: batch 1 in front, or batch 2 behind the sequence (sequence first)."""
    shapes = []
    for name, length, dim in zip("xyz", lengths, dims):
        if name in pattern:
            shapes.append((1, length, dim) if batch_first else (length, 2, dim))
    return shapes


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("pattern", ["xxx", "xyy", "xyz"])
def test_mha_self_and_cross_attention(pattern, batch_first, tmp_path):
    """Also run at another size of dimension 0: the batch, or the sequence length (sequence first)."""
    check_op(Attend(pattern, batch_first=batch_first), *_sequences(pattern, batch_first),
             directory=tmp_path, batch=3)


MHA_OPTIONS = [
    dict(bias=False),
    dict(add_bias_kv=True),
    dict(add_zero_attn=True),
    dict(add_bias_kv=True, add_zero_attn=True),
    dict(num_heads=1),
    dict(num_heads=8),
    dict(embed_dim=12, num_heads=3),
]


@pytest.mark.parametrize("options", MHA_OPTIONS, ids=str)
def test_mha_options(options, tmp_path):
    embed = options.get("embed_dim", 8)
    check_op(Attend(batch_first=True, **options), (1, 5, embed), directory=tmp_path, batch=2)


@pytest.mark.parametrize("batch_first", [True, False])
def test_mha_kdim_vdim(batch_first, tmp_path):
    model = Attend("xyz", batch_first=batch_first, kdim=6, vdim=4)
    shapes = _sequences("xyz", batch_first, dims=(8, 6, 4))
    check_op(model, *shapes, directory=tmp_path)


def test_mha_unbatched(tmp_path):
    check_op(Attend("xyy"), (5, 8), (6, 8), directory=tmp_path)


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_mha_returns_weights(average, batch_first, tmp_path):
    model = Attend("xyy", need_weights=True, average=average, batch_first=batch_first)
    check_op(model, *_sequences("xyy", batch_first), directory=tmp_path)


def test_mha_weights_unbatched(tmp_path):
    check_op(Attend(need_weights=True, average=False), (5, 8), directory=tmp_path)


class Masked(nn.Module):
    """MultiheadAttention with a mask that is an input, a constant buffer or computed."""

    def __init__(self, kind: str, cross: bool = False, need_weights: bool = False):
        super().__init__()
        self.attend = Attend("xyy" if cross else "xxx", need_weights=need_weights, batch_first=True)
        self.kind = kind
        causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
        self.register_buffer("bool_mask", causal)
        self.register_buffer("float_mask", torch.zeros(5, 5).masked_fill(causal, float("-inf")))

    def forward(self, x, *rest):
        mha, kind = self.attend.mha, self.kind
        y = rest[0] if self.attend.pattern == "xyy" else x
        extra = {
            "input": lambda: {"attn_mask": rest[-1]},
            "bool_input": lambda: {"attn_mask": rest[-1] > 0.5},
            "bool_buffer": lambda: {"attn_mask": self.bool_mask},
            "float_buffer": lambda: {"attn_mask": self.float_mask},
            "computed": lambda: {"attn_mask": torch.triu(torch.ones(5, 5), 1) * -1e9},
            "key_padding": lambda: {"key_padding_mask": rest[-1]},
            "key_padding_bool": lambda: {"key_padding_mask": rest[-1] > 0.5},
        }[kind]()
        out = mha(x, y, y, need_weights=self.attend.need_weights, **extra)
        return out if self.attend.need_weights else out[0]


@pytest.mark.parametrize("kind", ["bool_buffer", "float_buffer", "computed"])
@pytest.mark.parametrize("cross", [False, True])
def test_mha_constant_masks(kind, cross, tmp_path):
    check_op(Masked(kind, cross), *([(1, 5, 8)] * (2 if cross else 1)), directory=tmp_path, batch=3)


@pytest.mark.parametrize("kind,mask_shape", [("input", (5, 5)), ("input", (2, 5, 5)), ("bool_input", (5, 5)),
                                             ("key_padding", (1, 5)), ("key_padding_bool", (1, 5))])
def test_mha_mask_inputs(kind, mask_shape, tmp_path):
    check_op(Masked(kind), (1, 5, 8), mask_shape, directory=tmp_path)


def test_mha_key_padding_mask_follows_batch(tmp_path):
    check_op(Masked("key_padding_bool"), (1, 5, 8), (1, 5), directory=tmp_path, batch=4)


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_fully_masked_query(need_weights, tmp_path):
    """A query that may see no key: zeros through SDPA, NaN on the need_weights path (as PyTorch)."""
    mask = torch.zeros(5, 5)
    mask[2] = float("-inf")
    model = Masked("input", need_weights=need_weights)
    check_model(model, [torch.randn(1, 5, 8), mask], tmp_path)
