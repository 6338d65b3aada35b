"""A small vision transformer, written here in PyTorch, exported by pnnx and run at batch 1 and 3.

Patch embedding (a Conv2d with stride = patch size), tokens by flatten + transpose, a
class token expanded to the batch and concatenated, a position embedding, pre-norm
blocks (LayerNorm -> attention -> residual, LayerNorm -> Linear/GELU/Linear -> residual),
a final LayerNorm and a linear head on the class token. The attention is
nn.MultiheadAttention, or written by hand (Linear qkv, reshape/permute, matmul,
softmax), or F.scaled_dot_product_attention.

The export is dynamic (pnnx traced at batch 1 and 3): exported at one batch size only,
pnnx folds ``cls_token.expand(x.shape[0], -1, -1)`` into a constant of that batch.
"""

import pnnx
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from oracle import assert_matches, torch_outputs

import kuiperinfer

IMAGE, PATCH, CHANNELS, EMBED, HEADS, DEPTH, CLASSES = 32, 8, 3, 32, 4, 2, 10


class HandAttention(nn.Module):
    """Multi-head self-attention from a Linear qkv projection (timm's layout)."""

    def __init__(self, embed: int, heads: int, fused: bool):
        super().__init__()
        self.heads, self.fused = heads, fused
        self.scale = (embed // heads) ** -0.5
        self.qkv = nn.Linear(embed, 3 * embed)
        self.proj = nn.Linear(embed, embed)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.scale
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class TorchAttention(nn.Module):
    """nn.MultiheadAttention used for self-attention."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Block(nn.Module):
    def __init__(self, attention: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(EMBED, eps=1e-6)
        self.attn = (TorchAttention(EMBED, HEADS) if attention == "mha"
                     else HandAttention(EMBED, HEADS, fused=attention == "sdpa"))
        self.norm2 = nn.LayerNorm(EMBED, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(EMBED, 2 * EMBED), nn.GELU(), nn.Linear(2 * EMBED, EMBED))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, attention: str):
        super().__init__()
        tokens = (IMAGE // PATCH) ** 2 + 1
        self.patch_embed = nn.Conv2d(CHANNELS, EMBED, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, EMBED) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, EMBED) * 0.02)
        self.blocks = nn.Sequential(*[Block(attention) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(EMBED, eps=1e-6)
        self.head = nn.Linear(EMBED, CLASSES)
        with torch.no_grad():  # non-trivial LayerNorm affine and attention biases
            for name, p in self.named_parameters():
                if name.endswith(("norm1.weight", "norm2.weight", "norm.weight")):
                    p.uniform_(0.5, 1.5)
                elif name.endswith("bias"):
                    p.normal_(0, 0.1)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


@pytest.mark.parametrize("attention", ["mha", "hand", "sdpa"])
def test_vision_transformer(attention, tmp_path):
    torch.manual_seed(0)
    model = VisionTransformer(attention).eval()
    generator = torch.Generator().manual_seed(1)
    images = [torch.randn(batch, CHANNELS, IMAGE, IMAGE, generator=generator) for batch in (1, 3)]
    with torch.no_grad():
        pnnx.export(model, str(tmp_path / "vit.pt"), (images[0],), (images[1],))
    graph = kuiperinfer.load(tmp_path / "vit.pnnx.param")
    for batch in images:
        assert_matches(graph.run(batch.numpy()), torch_outputs(model, [batch]))
    types = {op.type for op in graph.operators}
    # the optimiser fuses hand-written attention, and GELU into the linear layer before it
    expected = {"mha": "nn.MultiheadAttention", "hand": "kuiper.Attention", "sdpa": "F.scaled_dot_product_attention"}
    assert expected[attention] in types
    assert {"nn.Conv2d", "nn.LayerNorm", "Tensor.expand", "torch.cat"} <= types and "nn.GELU" not in types
    plain = kuiperinfer.load(tmp_path / "vit.pnnx.param", optimize=False)
    assert {"nn.GELU", {"hand": "torch.matmul"}.get(attention, expected[attention])} <= \
        {op.type for op in plain.operators}
