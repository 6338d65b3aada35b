"""A small vision transformer (benchmarks/networks.py) with each of its three attentions,
exported by pnnx and run at batch 1 and 3.

The export is dynamic (pnnx traced at batch 1 and 3): exported at one batch size only,
pnnx folds ``cls_token.expand(x.shape[0], -1, -1)`` into a constant of that batch.
"""

import pnnx
import pytest
import torch
from oracle import assert_matches, torch_outputs

import kuiperinfer
from benchmarks.networks import SmallViT, small_vit


@pytest.mark.parametrize("attention", ["mha", "hand", "sdpa"])
def test_vision_transformer(attention, tmp_path):
    model = small_vit(attention)
    generator = torch.Generator().manual_seed(1)
    images = [torch.randn(batch, SmallViT.CHANNELS, SmallViT.IMAGE, SmallViT.IMAGE, generator=generator)
              for batch in (1, 3)]
    with torch.no_grad():
        pnnx.export(model, str(tmp_path / "vit.pt"), (images[0],), (images[1],))
    graph = kuiperinfer.load(tmp_path / "vit.pnnx.param")
    for batch in images:
        assert_matches(graph.run(batch.numpy()), torch_outputs(model, [batch]))
    types = {op.type for op in graph.operators}
    # the optimiser fuses hand-written attention and SDPA, and GELU into the linear layer before it
    fused = {"mha": "nn.MultiheadAttention", "hand": "kuiper.Attention", "sdpa": "kuiper.Attention"}
    assert fused[attention] in types
    assert {"nn.Conv2d", "nn.LayerNorm", "Tensor.expand", "torch.cat"} <= types and "nn.GELU" not in types
    plain = kuiperinfer.load(tmp_path / "vit.pnnx.param", optimize=False)
    written = {"mha": "nn.MultiheadAttention", "hand": "torch.matmul", "sdpa": "F.scaled_dot_product_attention"}
    assert {"nn.GELU", written[attention]} <= {op.type for op in plain.operators}
