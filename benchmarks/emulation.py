"""PyTorch computing what kuiperinfer's precisions define, to hold the engine to them and
to measure forms the engine does not run yet.

:func:`bf16_products` makes every product of a layer that holds weights (convolutions but
depthwise ones, linear layers) a sum of products of bfloat16 parts accumulated in float32:
one part is kuiperinfer's ``bf16`` precision (inputs rounded to bfloat16), two parts with
three products (hi*hi + hi*lo + lo*hi) the fp32-accurate form the matrix engine can compute
from bf16 products, three parts with six products a closer one
(:func:`kuiperinfer.kernels.matrix.bf16.split_product` is the same for one product).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F


def bf16_parts(x: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """``x`` as ``parts`` bfloat16 values (held in float32) whose sum is ``x`` to about 2^(-8 parts)."""
    pieces, rest = [], x
    for _ in range(parts):
        piece = rest.bfloat16().float()
        pieces.append(piece)
        rest = rest - piece
    return pieces


def _split(product, x: torch.Tensor, weight: torch.Tensor, parts: int) -> torch.Tensor:
    x_parts, w_parts = bf16_parts(x, parts), bf16_parts(weight, parts)
    return sum(product(x_parts[i], w_parts[j]) for i in range(parts) for j in range(parts - i))


def _product(module: nn.Module):
    """The product ``module`` computes, as a function of its input and a weight (no bias),
    for the layers whose products a precision changes; None for the others."""
    if isinstance(module, nn.Linear):
        return F.linear
    if isinstance(module, nn.Conv1d | nn.Conv2d):
        depthwise = module.groups > 1 and module.groups == module.in_channels and module.weight.shape[1] == 1
        return None if depthwise else lambda x, w: module._conv_forward(x, w, None)
    if isinstance(module, nn.ConvTranspose1d | nn.ConvTranspose2d):
        transpose = F.conv_transpose1d if isinstance(module, nn.ConvTranspose1d) else F.conv_transpose2d
        return lambda x, w: transpose(x, w, None, module.stride, module.padding, module.output_padding,
                                      module.groups, module.dilation)
    return None


@contextmanager
def bf16_products(model: nn.Module, parts: int = 1) -> Iterator[nn.Module]:
    """Within the block, ``model``'s convolutions (not depthwise), transposed convolutions
    and linear layers compute their products from ``parts`` bfloat16 parts of their inputs
    and weights, accumulated in float32; the bias is added in float32."""
    patched = []
    for module in model.modules():
        product = _product(module)
        if product is None:
            continue

        def forward(x, m=module, product=product):
            out = _split(product, x, m.weight, parts)
            if m.bias is None:
                return out
            return out + (m.bias if isinstance(m, nn.Linear) else m.bias.reshape(1, -1, *(1,) * (out.dim() - 2)))
        module.forward = forward
        patched.append(module)
    try:
        yield model
    finally:
        for module in patched:
            del module.forward
