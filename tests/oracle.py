"""PyTorch as the oracle: export a model with pnnx inside the test run and compare.

Every operator and network test goes through here, so the export settings live in one
place. The tolerance, 1e-4 absolute or 1e-3 relative on large values (``ATOL``, ``RTOL``),
and ``torch_outputs`` come from benchmarks/networks.py, which tools/network_errors.py shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pnnx
import torch

import kuiperinfer
from benchmarks.networks import ATOL, RTOL, torch_outputs


def export(model: torch.nn.Module, inputs: Sequence[torch.Tensor], directory: Path,
           name: str = "model", inputs2: Sequence[torch.Tensor] | None = None) -> Path:
    """Export ``model`` with pnnx traced on ``inputs``; returns the .pnnx.param path.

    With ``inputs2`` (other shapes, e.g. another batch size) pnnx exports dynamic
    shapes: sizes read from tensors stay run-time values instead of constants.
    pnnx writes operators it cannot name in Python as ``aten::...``; its generated
    ``_pnnx.py`` then fails to import, but the .param/.bin written before are complete.
    So with an nn.LSTM of two outputs: pnnx stops writing the ``_pnnx.py`` (left empty,
    without its ``Model``).
    """
    model.eval()
    with torch.no_grad():
        try:
            pnnx.export(model, str(directory / f"{name}.pt"), tuple(inputs),
                        None if inputs2 is None else tuple(inputs2), check_trace=False)
        except (SyntaxError, AttributeError):
            if not (directory / f"{name}.pnnx.param").exists():
                raise
    return directory / f"{name}.pnnx.param"


def assert_matches(ours: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                   atol: float = ATOL, rtol: float = RTOL) -> float:
    """Every output within atol, or rtol on large values; returns the max absolute error."""
    assert len(ours) == len(expected), f"{len(ours)} outputs, expected {len(expected)}"
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, expected)):
        a = np.asarray(a)
        assert a.shape == b.shape, f"output {i}: shape {a.shape}, expected {b.shape}"
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype}, expected {b.dtype}"
        if b.dtype.kind in "fc":  # complex: the distance in the complex plane
            np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=f"output {i}")
            finite = np.isfinite(b)
            if finite.any():
                worst = max(worst, float(np.max(np.abs(a[finite].astype(np.complex128) - b[finite]))))
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
    return worst


def check_model(model: torch.nn.Module, inputs: Sequence[torch.Tensor], directory: Path,
                more_inputs: Sequence[Sequence[torch.Tensor]] = (), atol: float = ATOL,
                rtol: float = RTOL, dynamic: bool = False) -> kuiperinfer.RuntimeGraph:
    """Export on ``inputs``, then compare kuiperinfer with PyTorch on ``inputs`` and each
    set of ``more_inputs`` (for example another batch size). With ``dynamic``, the
    export is traced on ``inputs`` and the first of ``more_inputs`` (pnnx's dynamic
    shapes). Returns the loaded graph."""
    model.eval()
    inputs2 = more_inputs[0] if dynamic else None
    graph = kuiperinfer.load(export(model, inputs, directory, inputs2=inputs2))
    for case in (inputs, *more_inputs):
        ours = graph.run(*[t.numpy() for t in case])
        assert_matches(ours, torch_outputs(model, case), atol, rtol)
    return graph


class Lambda(torch.nn.Module):
    """Wrap a function of tensors as a module, for one-operator tests."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class Holder(torch.nn.Module):
    """Hold one module as an attribute, the way models do."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *xs):
        return self.module(*xs)


def check_op(fn_or_module, *shapes: Sequence[int], directory: Path, batch: int | None = None,
             seed: int = 0, atol: float = ATOL, rtol: float = RTOL) -> kuiperinfer.RuntimeGraph:
    """Export one function or module on random inputs of ``shapes`` and compare with torch.

    A module is held by a wrapper, as in a real model: pnnx writes a module it
    exports at the top level in its functional form (nn.ReLU6 as F.hardtanh), but a
    held one as itself. With ``batch``, the export is also run at that batch size.
    """
    module = Holder(fn_or_module) if isinstance(fn_or_module, torch.nn.Module) else Lambda(fn_or_module)
    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(*shape, generator=generator) for shape in shapes]
    more = []
    if batch is not None:
        more.append([torch.randn(batch, *shape[1:], generator=generator) for shape in shapes])
    return check_model(module, inputs, directory, more, atol, rtol)


def check_dynamic(fn, inputs: Sequence[torch.Tensor], inputs2: Sequence[torch.Tensor],
                  directory: Path) -> kuiperinfer.RuntimeGraph:
    """Export ``fn`` with pnnx's dynamic shapes, so that sizes read from tensors stay run-time
    values; compare on both sets of inputs."""
    return check_model(Lambda(fn), inputs, directory, [inputs2], dynamic=True)


class Branches(torch.nn.Module):
    """Returns ``tuple(f(*inputs) for f in fns)``."""

    def __init__(self, *fns):
        super().__init__()
        self.fns = list(fns)
        for i, fn in enumerate(fns):
            if isinstance(fn, torch.nn.Module):
                setattr(self, f"m{i}", fn)

    def forward(self, *xs):
        return tuple(fn(*xs) for fn in self.fns)


def check_branches(fns, types, *inputs, directory, scale=3.0, batch=3):
    """Export :class:`Branches` of ``fns`` and compare with PyTorch; check that pnnx wrote
    every operator type in ``types``. Each of ``inputs`` is a tensor or a shape (random
    normal values times ``scale``). With ``batch``, the comparison is repeated with the
    first input's batch dimension changed."""
    generator = torch.Generator().manual_seed(0)
    tensors = [x if isinstance(x, torch.Tensor) else torch.randn(*x, generator=generator) * scale
               for x in inputs]
    more = []
    if batch is not None:
        first = tensors[0]
        other = torch.randn(batch, *first.shape[1:], generator=generator) * first.std() + first.mean()
        more.append([other, *tensors[1:]])
    graph = check_model(Branches(*fns), tensors, directory, more)
    written = {op.type for op in graph.operators}
    assert set(types) <= written, f"pnnx wrote {sorted(written)}"
    return graph
