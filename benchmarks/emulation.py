"""PyTorch computing what kuiperinfer's precisions define, to hold the engine to them and
to measure forms the engine does not run yet.

:func:`bf16_products` makes every product of a layer that holds weights (convolutions but
depthwise ones, linear layers) a sum of products of bfloat16 parts accumulated in float32:
one part is kuiperinfer's ``bf16`` precision (inputs rounded to bfloat16), two parts with
three products (hi*hi + hi*lo + lo*hi) the fp32-accurate form a matrix engine can compute
from bf16 products, three parts with six products a closer one.

A float32 is the sum of bfloat16 parts, ``x = hi + lo (+ ...)``: each part is the rounding
of what the parts before it left, so two parts hold 16 of the mantissa bits and three all
24. The products of part pairs ``(i, j)`` with ``i + j < parts`` recover a float32 product
to about 2^-16, or 2^-24.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn as nn


def bf16_parts(x: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """``x`` as ``parts`` bfloat16 values (held in float32) whose sum is ``x`` to about 2^(-8 parts)."""
    pieces, rest = [], x
    for _ in range(parts):
        piece = rest.bfloat16().float()
        pieces.append(piece)
        rest = rest - piece
    return pieces


def split_product(product, x: torch.Tensor, weight: torch.Tensor, parts: int) -> torch.Tensor:
    """``product(x, weight)`` (a bilinear function: torch.matmul, a convolution) from
    ``parts`` bfloat16 parts of both, the products of part pairs ``(i, j)`` with
    ``i + j < parts`` accumulated in float32."""
    x_parts, w_parts = bf16_parts(x, parts), bf16_parts(weight, parts)
    return sum(product(x_parts[i], w_parts[j]) for i in range(parts) for j in range(parts - i))


LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d)
"""The layers whose products a precision changes (depthwise convolutions excepted)."""


def _changed(module: nn.Module) -> bool:
    depthwise = isinstance(module, nn.Conv1d | nn.Conv2d) and module.groups > 1 \
        and module.groups == module.in_channels and module.weight.shape[1] == 1
    return isinstance(module, LAYERS) and not depthwise


def _product(module: nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """What ``module``'s own forward (a subclass's padding included) computes from ``x``
    with ``weight`` instead of its weight, and no bias."""
    saved = module._parameters["weight"], module._parameters["bias"]
    module._parameters["weight"], module._parameters["bias"] = weight, None
    try:
        return type(module).forward(module, x)
    finally:
        module._parameters["weight"], module._parameters["bias"] = saved


@contextmanager
def bf16_products(model: nn.Module, parts: int = 1) -> Iterator[nn.Module]:
    """Within the block, ``model``'s convolutions (not depthwise), transposed convolutions
    and linear layers compute their products from ``parts`` bfloat16 parts of their inputs
    and weights, accumulated in float32; the bias is added in float32."""
    patched = []
    for module in filter(_changed, model.modules()):
        def forward(x, m=module):
            out = split_product(partial(_product, m), x, m.weight, parts)
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
