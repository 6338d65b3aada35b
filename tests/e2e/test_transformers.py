"""ViT-Tiny- and MiniLM-shaped networks (benchmarks/networks.py, small sizes) against PyTorch.

Both are exported for any batch size (pnnx traced at batch 1 and 3) and run at both; the
optimiser fuses their attention into ``kuiper.Attention``, GELU into the first feed-forward
linear layer and the residual additions into the layer normalisations after them.
"""

import torch
from oracle import check_model

from benchmarks.networks import SentenceEncoder, VisionTransformer, randomize_transformer


def sentences(batch: int, length: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask whose sentences end at different lengths (one at 1)."""
    ids = torch.randint(0, vocab, (batch, length))
    mask = (torch.arange(length)[None] < torch.tensor([length, 1, length - 2][:batch])[:, None]).long()
    return ids, mask


def test_vit_tiny_layout(tmp_path):
    torch.manual_seed(0)
    model = randomize_transformer(VisionTransformer(image=48, patch=16, dim=48, depth=2, heads=3, hidden=96,
                                                   classes=10))
    graph = check_model(model, (torch.rand(1, 3, 48, 48),), tmp_path, [(torch.rand(3, 3, 48, 48),)], dynamic=True)
    types = [op.type for op in graph.operators]
    assert types.count("kuiper.Attention") == 2 and "nn.GELU" not in types and graph.batching.independent


def test_minilm_layout(tmp_path):
    torch.manual_seed(0)
    model = randomize_transformer(SentenceEncoder(vocab=50, length=11, dim=48, depth=2, heads=4, hidden=96))
    graph = check_model(model, sentences(1, 11, 50), tmp_path, [sentences(3, 11, 50)], dynamic=True)
    types = [op.type for op in graph.operators]
    assert types.count("kuiper.Attention") == 2 and "nn.GELU" not in types and graph.batching.independent
