"""Recurrent layers: nn.RNN, nn.LSTM and nn.GRU, with all their options.

One layer of one direction runs in two parts. The input's contribution to the gates of
every time step does not depend on the recurrence, so it is one matrix product for the
whole sequence up front (``x @ W_ih^T + b``, (L, N, gates)); then a loop over the time
steps adds the hidden state's contribution (``h @ W_hh^T``) and applies the cell's gates.
With ``bidirectional`` a second direction reads the sequence backwards; the two outputs
are joined along the features and feed the next of ``num_layers`` layers (PyTorch's
``dropout`` between layers only acts in training: inference ignores it).

Gates in PyTorch's order, with the weights of each (layer, direction) packed once at build
time, transposed and contiguous:

* RNN: ``h = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, act tanh or relu (``nonlinearity``).
* LSTM, gates i, f, g, o: ``c = sigmoid(f) * c + sigmoid(i) * tanh(g)``,
  ``h = sigmoid(o) * tanh(c)``, then with ``proj_size`` ``h = h W_hr^T``.
* GRU, gates r, z, n: ``n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))``,
  ``h = (1 - z) * n + z * h``; ``b_hn`` stays inside the product with r.

Everywhere else the two biases are summed into one, added with the input projection.

What pnnx writes, and how it is read:

* Parameters ``input_size, hidden_size, num_layers, bias, batch_first, bidirectional``, and
  ``proj_size`` (LSTM) or ``nonlinearity`` (RNN); weights ``@weight_ih_l{k}``,
  ``@weight_hh_l{k}``, ``@bias_ih_l{k}``, ``@bias_hh_l{k}``, ``@weight_hr_l{k}`` (proj_size),
  each with a ``_reverse`` twin for the backward direction.
* Inputs: the sequence, then the initial states if the model gives them (h_0 for RNN and
  GRU, h_0 and c_0 for LSTM, or one for both when the model gives the same tensor twice:
  pnnx merges repeated inputs); absent states are zeros. The sequence is (L, N, input_size),
  (N, L, input_size) with batch_first, or (L, input_size) unbatched; states are
  (num_layers * directions, N, size), or without N for an unbatched sequence.
* Outputs: output, h_n and c_n as separate outputs, the ones the model uses (an unused one
  may stay, read by nothing); a ``prim::TupleConstruct`` after them rebuilds PyTorch's
  tuples, and no ``prim::TupleUnpack`` remains. pnnx does not record which output is
  which, and does not always list them as (output, h_n, c_n) (its own Python reader
  assumes that order): often in the order the model first uses them. They are told apart
  here by the shapes pnnx recorded (the output sequence's, h_n's and c_n's differ unless
  the sizes coincide); where those agree, two outputs of an LSTM put in a pair inside a
  pair with the third are, as in PyTorch's ``(output, (h_n, c_n))``, h_n and c_n (pnnx
  writes an unbatched LSTM's outputs in the order h_n, c_n, output when the model returns
  that tuple), and otherwise the order (output, h_n, c_n) is taken. What stays ambiguous:
  an LSTM without proj_size (h_n and c_n of one shape) whose model uses c_n without
  using h_n before it is read as if it used h_n there, since pnnx writes both models
  the same; and a model using only (h_n, c_n) of a one-layer, one-direction LSTM exported
  on a single time step is read as using (output, h_n), whose shapes and values are then
  the same as h_n's.

The sequence's batch is dimension 1 unless ``batch_first``, and h_n and c_n lead with the
layers: the layer keeps the batch whole (``batch_independent``) except for a batch-first
sequence without initial states whose only output read is the output sequence.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from kuiperinfer.errors import InferError, InferStatus
from kuiperinfer.errors import ParseParameterAttrStatus as Status
from kuiperinfer.kernels.elementwise import relu_, sigmoid
from kuiperinfer.layers.base import Layer
from kuiperinfer.layers.linear import linear
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import BuildOptions
from kuiperinfer.runtime.registry import register_layer

Shape = tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Direction:
    """One direction of one layer: its weights, packed for the two products of a step."""

    weight_ih_t: np.ndarray
    """(input features, gates * hidden_size), contiguous."""
    bias: np.ndarray | None
    """Added to the input projection: b_ih + b_hh (GRU: b_hh of the r and z gates only)."""
    weight_hh_t: np.ndarray
    """(state size, gates * hidden_size), contiguous; the state size is proj_size if set."""
    bias_hn: np.ndarray | None = None
    """GRU: b_hn, added to h W_hn^T inside the product with r."""
    weight_hr_t: np.ndarray | None = None
    """LSTM with proj_size: (hidden_size, proj_size), projecting h after each step."""


class Recurrent(Layer):
    """The parts RNN, LSTM and GRU share: parameters, weights, states, layers and directions.

    Subclasses give the number of ``gates`` (weight rows per hidden unit), the ``states``
    they carry (h, and c for LSTM) and :meth:`step`, one time step of one direction.
    """

    gates: ClassVar[int] = 1
    states: ClassVar[tuple[str, ...]] = ("h",)

    def __init__(self, layer_name: str, layers: tuple[tuple[Direction, ...], ...], input_size: int,
                 hidden_size: int, proj_size: int, batch_first: bool, roles: tuple[str, ...]):
        super().__init__(layer_name)
        self.layers, self.input_size, self.hidden_size = layers, input_size, hidden_size
        self.proj_size, self.batch_first, self.roles = proj_size, batch_first, roles
        self.directions = len(layers[0])

    @property
    def state_sizes(self) -> dict[str, int]:
        """The size of each state: h has proj_size features when there is a projection."""
        return {"h": self.proj_size or self.hidden_size, "c": self.hidden_size}

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> Recurrent:
        input_size = op.param_int("input_size", Status.kParameterMissingInChannel)
        hidden_size = op.param_int("hidden_size", Status.kParameterMissingOutChannel)
        num_layers = op.param_int("num_layers", default=1)
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if value < 1:
                raise op.error(f"{name} must be positive, got {value}", Status.kParameterInvalidValue)
        proj_size = cls.read_proj_size(op, hidden_size)
        use_bias = op.param_bool("bias", Status.kParameterMissingUseBias, default=op.has_weight("bias_ih_l0"))
        batch_first = op.param_bool("batch_first", default=False)
        directions = 2 if op.param_bool("bidirectional", default=False) else 1

        if not 1 <= len(op.input_operands_seq) <= 1 + len(cls.states):
            states = " and ".join(f"{s}_0" for s in cls.states)
            raise op.error(f"expected the input sequence and optionally {states}, got "
                           f"{len(op.input_operands_seq)} inputs", Status.kParameterInvalidValue)
        layer = cls(op.name, cls.read_weights(op, input_size, hidden_size, proj_size, num_layers, directions,
                                              use_bias),
                    input_size, hidden_size, proj_size, batch_first, ())
        layer.roles = layer.output_roles(op, num_layers)
        read = {role for role, operand in zip(layer.roles, op.output_operands) if operand.consumers}
        layer.batch_independent = (batch_first and len(op.input_operands_seq) == 1
                                   and len(op.input_operands_seq[0].shapes) == 3 and read <= {"output"})
        return layer

    @classmethod
    def read_proj_size(cls, op: RuntimeOperator, hidden_size: int) -> int:
        """LSTM's proj_size (0: none); the other cells have none."""
        return 0

    @classmethod
    def read_weights(cls, op: RuntimeOperator, input_size: int, hidden_size: int, proj_size: int,
                     num_layers: int, directions: int, use_bias: bool) -> tuple[tuple[Direction, ...], ...]:
        """Every (layer, direction)'s weights, read (shapes checked) and packed."""
        rows, state = cls.gates * hidden_size, proj_size or hidden_size
        layers = []
        for k in range(num_layers):
            features = input_size if k == 0 else directions * state
            packed = []
            for suffix in ("", "_reverse")[:directions]:
                key = f"_l{k}{suffix}"                  # weight_ih_l0, bias_hh_l1_reverse, ...
                biases = None
                if use_bias:
                    biases = tuple(op.weight(f"{name}{key}", (rows,), Status.kAttrMissingBias, copy=False)
                                   for name in ("bias_ih", "bias_hh"))
                weight_hr = op.weight(f"weight_hr{key}", (proj_size, hidden_size), copy=False) if proj_size else None
                packed.append(cls.pack(op.weight(f"weight_ih{key}", (rows, features), copy=False),
                                       op.weight(f"weight_hh{key}", (rows, state), copy=False), biases, weight_hr))
            layers.append(tuple(packed))
        return tuple(layers)

    @classmethod
    def pack(cls, weight_ih: np.ndarray, weight_hh: np.ndarray, biases: tuple[np.ndarray, np.ndarray] | None,
             weight_hr: np.ndarray | None) -> Direction:
        """A Direction from PyTorch's weights: transposed, and the two biases summed."""
        return Direction(_transposed(weight_ih), None if biases is None else biases[0] + biases[1],
                         _transposed(weight_hh), weight_hr_t=None if weight_hr is None else _transposed(weight_hr))

    # -- which output is which -------------------------------------------------------

    def output_roles(self, op: RuntimeOperator, num_layers: int) -> tuple[str, ...]:
        """What each of ``op``'s outputs is: "output", "h_n" or "c_n" (see the module docstring)."""
        roles = ("output", "h_n", "c_n")[:1 + len(self.states)]
        if not 1 <= len(op.output_operands) <= len(roles):
            raise op.error(f"expected 1 to {len(roles)} outputs ({', '.join(roles)}), got "
                           f"{len(op.output_operands)}", Status.kParameterInvalidValue)
        expected = self.expected_shapes(tuple(op.input_operands_seq[0].shapes), num_layers)
        recorded = [tuple(o.shapes) for o in op.output_operands]
        candidates = [*_tuple_hint(op), *itertools.permutations(roles, len(recorded))]
        best, best_score = None, -1
        for order in candidates:
            scores = [_agreement(shape, expected[role]) for shape, role in zip(recorded, order)]
            if None not in scores and sum(scores) > best_score:
                best, best_score = order, sum(scores)
        if best is None:
            raise op.error(f"the output shapes {recorded} fit none of {', '.join(roles)} "
                           f"(expected {', '.join(f'{r} {expected[r]}' for r in roles)})",
                           Status.kParameterInvalidValue)
        return best

    def expected_shapes(self, input_shape: Shape, num_layers: int) -> dict[str, Shape]:
        """The output shapes for an input sequence of ``input_shape`` (-1 stays unknown)."""
        sizes, stacked = self.state_sizes, num_layers * self.directions
        if len(input_shape) == 2:
            length, batch = input_shape[0], ()
        elif len(input_shape) == 3:
            length, n = (input_shape[1], input_shape[0]) if self.batch_first else input_shape[:2]
            batch = (n,)
        else:
            return {"output": (), "h_n": (), "c_n": ()}
        features = self.directions * sizes["h"]
        output = (*batch, length, features) if self.batch_first else (length, *batch, features)
        return {"output": output, "h_n": (stacked, *batch, sizes["h"]), "c_n": (stacked, *batch, sizes["c"])}

    # -- running -----------------------------------------------------------------------

    def forward(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise InferError(f"input of shape {x.shape} is not (L, N, {self.input_size}), (N, L, {self.input_size}) "
                             f"with batch_first or (L, {self.input_size}) unbatched",
                             status=InferStatus.kInferFailedDimensionParameterError)
        batched = x.ndim == 3
        # time-major (L, N, features) inside: one time step is a contiguous slice
        x = (x.swapaxes(0, 1) if self.batch_first else x) if batched else x[:, None]
        initial = {name: self.initial_state(inputs, i, name, x.shape[1], batched)
                   for i, name in enumerate(self.states)}

        finals: dict[str, list[np.ndarray]] = {name: [] for name in self.states}
        for k, directions in enumerate(self.layers):
            outputs = []
            for d, direction in enumerate(directions):
                index = k * self.directions + d
                start = {name: initial[name][index] for name in self.states}
                sequence, last = self.scan(direction, x, start, reverse=d == 1)
                outputs.append(sequence)
                for name in self.states:
                    finals[name].append(last[name])
            x = outputs[0] if len(outputs) == 1 else np.concatenate(outputs, axis=-1)

        results = {"output": x, **{f"{name}_n": np.stack(finals[name]) for name in self.states}}
        if not batched:
            results = {role: value[:, 0] for role, value in results.items()}
        elif self.batch_first:
            results["output"] = np.ascontiguousarray(x.swapaxes(0, 1))
        return [results[role] for role in self.roles]

    def initial_state(self, inputs: Sequence[Any], i: int, name: str, batch: int, batched: bool) -> np.ndarray:
        """State ``name`` (the i-th) for every (layer, direction): (layers * directions, N, size),
        from the inputs after the sequence, or zeros when the model gives none. An LSTM given
        the same tensor as h_0 and c_0 has one state input: pnnx merges repeated inputs."""
        size, stacked = self.state_sizes[name], len(self.layers) * self.directions
        if len(inputs) == 1:
            return np.zeros((stacked, batch, size), np.float32)
        state = np.asarray(inputs[min(1 + i, len(inputs) - 1)], dtype=np.float32)
        expected = (stacked, batch, size) if batched else (stacked, size)
        if state.shape != expected:
            raise InferError(f"{name}_0 of shape {state.shape} is not {expected} (layers * directions, "
                             f"{'batch, ' if batched else ''}size) for an input of {batch} "
                             f"{'sequences' if batched else 'unbatched sequence'}",
                             status=InferStatus.kInferFailedDimensionParameterError)
        return state if batched else state[:, None]

    def scan(self, direction: Direction, x: np.ndarray, state: dict[str, np.ndarray],
             reverse: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Run one direction over the sequence ``x`` (L, N, features) from ``state``:
        the output sequence (L, N, h size) and the final states."""
        projected = linear(x, direction.weight_ih_t, direction.bias)     # every step's input part
        sequence = np.empty((x.shape[0], x.shape[1], self.state_sizes["h"]), np.float32)
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        for t in steps:
            state = self.step(direction, projected[t], state)
            sequence[t] = state["h"]
        return sequence, state

    def step(self, direction: Direction, projected: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One time step: the new states from the step's input projection (N, gates * hidden)."""
        raise NotImplementedError


@register_layer("nn.RNN")
class RNN(Recurrent):
    """Elman RNN: h = tanh(x W_ih^T + h W_hh^T + b), or relu with nonlinearity=relu."""

    relu = False
    """Whether the nonlinearity is relu (set per instance by create), else tanh."""

    @classmethod
    def create(cls, op: RuntimeOperator, options: BuildOptions) -> RNN:
        nonlinearity = op.param_str("nonlinearity", default="tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise op.error(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}",
                           Status.kParameterInvalidValue)
        layer = super().create(op, options)
        layer.relu = nonlinearity == "relu"
        return layer

    def step(self, direction: Direction, projected: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        h = state["h"] @ direction.weight_hh_t
        h += projected
        return {"h": relu_(h) if self.relu else np.tanh(h, out=h)}


@register_layer("nn.LSTM")
class LSTM(Recurrent):
    """Long short-term memory, gates i, f, g, o; with proj_size, h is projected after each step."""

    gates = 4
    states = ("h", "c")

    @classmethod
    def read_proj_size(cls, op: RuntimeOperator, hidden_size: int) -> int:
        proj_size = op.param_int("proj_size", default=0)
        if not 0 <= proj_size < hidden_size:
            raise op.error(f"proj_size must be 0 (none) or less than hidden_size {hidden_size}, got {proj_size}",
                           Status.kParameterInvalidValue)
        return proj_size

    def step(self, direction: Direction, projected: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        gates = state["h"] @ direction.weight_hh_t
        gates += projected
        i, f, g, o = np.split(gates, 4, axis=1)
        c = sigmoid(f) * state["c"] + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        if direction.weight_hr_t is not None:
            h = h @ direction.weight_hr_t
        return {"h": h, "c": c}


@register_layer("nn.GRU")
class GRU(Recurrent):
    """Gated recurrent unit, gates r, z, n; b_hn is added to h W_hn^T before the product with r."""

    gates = 3

    @classmethod
    def pack(cls, weight_ih: np.ndarray, weight_hh: np.ndarray, biases: tuple[np.ndarray, np.ndarray] | None,
             weight_hr: np.ndarray | None) -> Direction:
        if biases is None:
            return Direction(_transposed(weight_ih), None, _transposed(weight_hh))
        bias_ih, bias_hh = biases
        hidden = bias_hh.size // 3
        bias = bias_ih.copy()
        bias[:2 * hidden] += bias_hh[:2 * hidden]      # r and z: both biases add up; n: only b_in here
        return Direction(_transposed(weight_ih), bias, _transposed(weight_hh), bias_hn=bias_hh[2 * hidden:].copy())

    def step(self, direction: Direction, projected: np.ndarray, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        h = state["h"]
        hidden = h @ direction.weight_hh_t
        if direction.bias_hn is not None:
            hidden[:, 2 * self.hidden_size:] += direction.bias_hn
        input_rz, input_n = np.split(projected, [2 * self.hidden_size], axis=1)
        hidden_rz, hidden_n = np.split(hidden, [2 * self.hidden_size], axis=1)
        r, z = np.split(sigmoid(input_rz + hidden_rz), 2, axis=1)
        n = np.tanh(input_n + r * hidden_n)
        return {"h": n + z * (h - n)}


def _transposed(weight: np.ndarray) -> np.ndarray:
    """W^T as a new contiguous float32 array, for ``x @ W^T``."""
    return np.ascontiguousarray(weight.T, dtype=np.float32)


def _agreement(recorded: Shape, expected: Shape) -> int | None:
    """How well a recorded output shape fits an expected one: None if a known dimension
    differs, else the number of equal dimensions (0 when either shape is unknown)."""
    if not recorded or not expected:
        return 0
    if len(recorded) != len(expected):
        return None
    if any(r != e and r >= 0 and e >= 0 for r, e in zip(recorded, expected)):
        return None
    return sum(r == e for r, e in zip(recorded, expected))


def _tuple_hint(op: RuntimeOperator) -> list[tuple[str, ...]]:
    """The roles of an LSTM's three outputs when the model puts two of them in a pair and
    that pair in another with the third, as nn.LSTM returns (output, (h_n, c_n)): the pair
    is (h_n, c_n). [] otherwise."""
    outputs = op.output_operands
    if len(outputs) != 3:
        return []
    for inner in op.output_operators:
        pair = inner.input_operands_seq
        if inner.type != "prim::TupleConstruct" or len(pair) != 2 or len(inner.output_operands) != 1 \
                or not all(any(o is p for o in outputs) for p in pair) or pair[0] is pair[1]:
            continue
        (single,) = [o for o in outputs if o is not pair[0] and o is not pair[1]]
        for outer in inner.output_operands[0].consumers:
            items = outer.input_operands_seq
            if outer.type == "prim::TupleConstruct" and len(items) == 2 and any(i is single for i in items):
                roles = {id(single): "output", id(pair[0]): "h_n", id(pair[1]): "c_n"}
                return [tuple(roles[id(o)] for o in outputs)]
    return []
