"""nn.LSTM, nn.GRU and nn.RNN against PyTorch, exported by pnnx.

Each case is exported once with pnnx's dynamic shapes, traced on a batch of 1 sequence of
7 steps and on 3 sequences of 1 step, and compared with PyTorch at batch 1 and 3 and
sequence lengths 1 and 7 (every output, shape and dtype). Some cases are also exported
with static shapes, where which output is which is read from the shapes pnnx recorded.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from oracle import assert_matches, check_model, export, torch_outputs
from test_hostile_models import WRONG_TYPES, build_one_operator, one_operator_model

import kuiperinfer
from kuiperinfer.errors import InferError, LayerCreateError
from kuiperinfer.pnnx import StoreZipWriter

INPUT, HIDDEN = 4, 5
TYPES = {nn.LSTM: "nn.LSTM", nn.GRU: "nn.GRU", nn.RNN: "nn.RNN"}


class Uses(nn.Module):
    """Runs a recurrent module on ``x`` (and the initial states given after it) and returns
    what ``use`` says:

    * ``tuple``: PyTorch's result as is, (output, h_n) or (output, (h_n, c_n));
    * ``unpacked``: output, h_n and c_n, each used on its own (here: * 2, + 1, - 1);
    * ``output``, ``h_n``, ``c_n``: only that one;
    * ``h_n, output``: both, h_n first.
    """

    def __init__(self, rnn: nn.Module, use: str):
        super().__init__()
        self.rnn, self.use = rnn, use

    def forward(self, x, *states):
        lstm = isinstance(self.rnn, nn.LSTM)
        if states:
            result = self.rnn(x, tuple(states) if lstm else states[0])
        else:
            result = self.rnn(x)
        if self.use == "tuple":
            return result
        output, hidden = result
        h_n, c_n = hidden if lstm else (hidden, None)
        # only what is returned is computed: pnnx writes the outputs the model uses
        if self.use == "unpacked":
            return (output * 2, h_n + 1) + ((c_n - 1,) if lstm else ())
        if self.use == "h_n, output":
            return h_n, output
        return {"output": output, "h_n": h_n, "c_n": c_n}[self.use]


def inputs(rnn: nn.Module, batch: int | None, length: int, with_states: bool, seed: int = 0) -> list[torch.Tensor]:
    """A random sequence of ``length`` steps for ``rnn`` (unbatched for batch None), and its
    initial states if ``with_states``."""
    generator = torch.Generator().manual_seed(seed)
    if batch is None:
        shape = (length, rnn.input_size)
    else:
        shape = (batch, length, rnn.input_size) if rnn.batch_first else (length, batch, rnn.input_size)
    tensors = [torch.randn(*shape, generator=generator)]
    if with_states:
        stacked = rnn.num_layers * (2 if rnn.bidirectional else 1)
        lead = (stacked,) if batch is None else (stacked, batch)
        sizes = [getattr(rnn, "proj_size", 0) or rnn.hidden_size]
        if isinstance(rnn, nn.LSTM):
            sizes.append(rnn.hidden_size)
        tensors += [torch.randn(*lead, size, generator=generator) for size in sizes]
    return tensors


def check_recurrent(cell, kwargs: dict, use: str, directory, with_states: bool = False,
                    batched: bool = True, dynamic: bool = True) -> kuiperinfer.RuntimeGraph:
    """Export ``Uses(cell(INPUT, HIDDEN, **kwargs), use)`` and compare with PyTorch at batch 1
    and 3 (one unbatched sequence when not ``batched``) and sequence lengths 7 and 1."""
    torch.manual_seed(0)
    rnn = cell(INPUT, HIDDEN, **kwargs)
    batches = (1, 3) if batched else (None, None)
    cases = [inputs(rnn, batch, length, with_states, seed)
             for seed, (batch, length) in enumerate([(batches[0], 7), (batches[1], 1), (batches[1], 7),
                                                     (batches[0], 1)])]
    if not dynamic:      # static shapes: only dimension 0 may change
        cases = cases[:1]
    graph = check_model(Uses(rnn, use), cases[0], directory, cases[1:], dynamic=dynamic)
    assert TYPES[cell] in {op.type for op in graph.operators}
    return graph


# -- LSTM --------------------------------------------------------------------------------

LSTM_CASES = [
    ({}, "tuple", False),
    ({"num_layers": 2, "bidirectional": True}, "tuple", False),
    ({"bias": False}, "unpacked", False),
    ({"batch_first": True}, "output", False),
    ({"proj_size": 3}, "tuple", False),
    ({"proj_size": 3, "bidirectional": True, "num_layers": 2}, "unpacked", True),
    ({"proj_size": 2, "batch_first": True}, "c_n", True),
    ({"batch_first": True}, "unpacked", True),
    ({"bidirectional": True}, "unpacked", True),
    ({"num_layers": 3, "batch_first": True, "bias": False}, "h_n", True),
    ({"num_layers": 2}, "h_n, output", False),
    ({"num_layers": 2, "dropout": 0.5}, "output", False),
]


@pytest.mark.parametrize("kwargs, use, with_states", LSTM_CASES, ids=str)
def test_lstm(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.LSTM, kwargs, use, tmp_path, with_states)


@pytest.mark.parametrize("kwargs, use, with_states", [
    ({}, "tuple", False),
    ({"num_layers": 2, "bidirectional": True}, "unpacked", True),
    ({"proj_size": 3}, "h_n, output", True),
], ids=str)
def test_lstm_unbatched(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.LSTM, kwargs, use, tmp_path, with_states, batched=False)


@pytest.mark.parametrize("length", [1, 7])
@pytest.mark.parametrize("batched", [True, False])
def test_lstm_tuple_with_static_shapes(length, batched, tmp_path):
    """The model returns the LSTM's tuple: pnnx lists an unbatched LSTM's outputs as h_n,
    c_n, output, and at length 1 all three have the same shape."""
    torch.manual_seed(0)
    rnn = nn.LSTM(INPUT, HIDDEN)
    graph = check_model(Uses(rnn, "tuple"), inputs(rnn, 1 if batched else None, length, False), tmp_path)
    lstm, = (op for op in graph.operators if op.type == "nn.LSTM")
    assert len(lstm.output_operands) == 3


@pytest.mark.parametrize("use", ["unpacked", "h_n, output", "output", "h_n"])
def test_lstm_outputs_with_static_shapes(use, tmp_path):
    check_recurrent(nn.LSTM, {"num_layers": 2, "batch_first": True}, use, tmp_path, with_states=True,
                    dynamic=False)


class SameStates(nn.Module):
    """h_0 and c_0 the same tensor: pnnx writes one state input."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, HIDDEN, num_layers=2)

    def forward(self, x, h):
        return self.lstm(x, (h, h))


class StatesInTheModel(nn.Module):
    """Initial states computed in the model, from the input's batch size."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(INPUT, HIDDEN, batch_first=True)

    def forward(self, x):
        return self.gru(x, torch.zeros(1, x.size(0), HIDDEN) + 0.5)[0]


def test_lstm_with_one_tensor_as_both_states(tmp_path):
    generator = torch.Generator().manual_seed(0)
    graph = check_model(SameStates(), [torch.randn(7, 2, INPUT, generator=generator),
                                       torch.randn(2, 2, HIDDEN, generator=generator)], tmp_path)
    lstm, = (op for op in graph.operators if op.type == "nn.LSTM")
    assert len(lstm.input_operands_seq) == 2


def test_gru_with_states_computed_in_the_model(tmp_path):
    generator = torch.Generator().manual_seed(0)
    check_model(StatesInTheModel(), [torch.randn(1, 7, INPUT, generator=generator)], tmp_path,
                [[torch.randn(3, 7, INPUT, generator=generator)]], dynamic=True)


def test_pnnx_writes_c_n_as_it_writes_h_n(tmp_path):
    """Why an LSTM without proj_size whose model uses c_n alone is read as using h_n: pnnx
    writes one output, the same text for both (if a pnnx tells them apart, read what it records)."""
    texts = []
    for use in ("h_n", "c_n"):
        (tmp_path / use).mkdir()
        torch.manual_seed(0)
        rnn = nn.LSTM(INPUT, HIDDEN)
        texts.append(export(Uses(rnn, use), inputs(rnn, 1, 7, False), tmp_path / use).read_text())
    assert texts[0] == texts[1]


# -- GRU ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, use, with_states", [
    ({}, "tuple", False),
    ({"num_layers": 2, "bidirectional": True}, "tuple", True),
    ({"bias": False, "bidirectional": True}, "unpacked", False),
    ({"batch_first": True}, "unpacked", True),
    ({"batch_first": True, "num_layers": 2}, "output", False),
    ({"num_layers": 2}, "h_n", True),
    ({"num_layers": 2, "dropout": 0.5}, "h_n, output", False),
], ids=str)
def test_gru(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.GRU, kwargs, use, tmp_path, with_states)


@pytest.mark.parametrize("kwargs, use, with_states", [
    ({}, "tuple", False),
    ({"num_layers": 2, "bidirectional": True}, "unpacked", True),
], ids=str)
def test_gru_unbatched(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.GRU, kwargs, use, tmp_path, with_states, batched=False)


# -- RNN ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, use, with_states", [
    ({}, "tuple", False),
    ({"nonlinearity": "relu"}, "tuple", False),
    ({"nonlinearity": "relu", "num_layers": 2, "bidirectional": True}, "unpacked", True),
    ({"num_layers": 2, "bidirectional": True}, "tuple", False),
    ({"bias": False, "batch_first": True}, "unpacked", True),
    ({"batch_first": True, "nonlinearity": "relu"}, "output", False),
    ({"num_layers": 2}, "h_n", True),
    ({"bidirectional": True}, "h_n, output", False),
], ids=str)
def test_rnn(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.RNN, kwargs, use, tmp_path, with_states)


@pytest.mark.parametrize("kwargs, use, with_states", [
    ({}, "tuple", False),
    ({"nonlinearity": "relu", "bidirectional": True}, "unpacked", True),
], ids=str)
def test_rnn_unbatched(kwargs, use, with_states, tmp_path):
    check_recurrent(nn.RNN, kwargs, use, tmp_path, with_states, batched=False)


# -- the batch, and a whole model --------------------------------------------------------

@pytest.mark.parametrize("batch_first, use, separable", [
    (True, "output", True), (True, "unpacked", False), (False, "output", False)])
def test_only_a_batch_first_output_sequence_lets_the_batch_split(batch_first, use, separable, tmp_path):
    """h_n and c_n lead with the layers, the sequence without batch_first with the time steps:
    the graph then runs the batch whole. Split or not, two threads give PyTorch's result."""
    torch.manual_seed(0)
    rnn = nn.GRU(INPUT, HIDDEN, batch_first=batch_first)
    model = Uses(rnn, use)
    path = export(model, inputs(rnn, 1, 7, False), tmp_path)
    graph = kuiperinfer.load(path, threads=2)
    assert graph.batching.independent == separable
    x = inputs(rnn, 4 if batch_first else 1, 7, False, seed=1)[0]
    assert_matches(graph.run(x.numpy()), torch_outputs(model, [x]))


class CRNN(nn.Module):
    """A text-line recogniser: a small CNN over the height, its columns as a sequence read by
    a two-layer bidirectional LSTM, and per-column class scores."""

    def __init__(self, classes: int = 11):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 1)),
            nn.Conv2d(16, 16, (4, 1)), nn.ReLU())
        self.lstm = nn.LSTM(16, 12, num_layers=2, bidirectional=True)
        self.classifier = nn.Linear(24, classes)

    def forward(self, image):
        columns = self.features(image).squeeze(2).permute(2, 0, 1)    # (W, N, C)
        sequence, _ = self.lstm(columns)
        return self.classifier(sequence).log_softmax(-1)


def test_crnn_end_to_end(tmp_path):
    torch.manual_seed(0)
    model = CRNN()
    with torch.no_grad():
        model.features[1].running_mean.uniform_(-0.5, 0.5)
        model.features[1].running_var.uniform_(0.5, 2)
    generator = torch.Generator().manual_seed(0)
    images = [torch.rand(n, 1, 16, 32, generator=generator) for n in (1, 3)]
    graph = check_model(model, images[:1], tmp_path, [images[1:]])
    assert "nn.LSTM" in {op.type for op in graph.operators}
    assert graph(images[1].numpy()).shape == (16, 3, 11)


# -- refused -----------------------------------------------------------------------------

def test_bad_states_at_run_time_say_what_is_expected(tmp_path):
    torch.manual_seed(0)
    rnn = nn.LSTM(INPUT, HIDDEN, num_layers=2)
    graph = kuiperinfer.load(export(Uses(rnn, "tuple"), inputs(rnn, 1, 7, True), tmp_path, inputs2=inputs(rnn, 3, 2, True)))
    x, h, c = (t.numpy() for t in inputs(rnn, 3, 2, True))
    with pytest.raises(InferError, match=r"c_0 of shape \(2, 2, 5\) is not \(2, 3, 5\)"):
        graph.run(x, h, c[:, :2])


def _lstm_param(params: str, outputs: str = "1 2 3") -> str:
    count = len(outputs.split())
    return (f"7767517\n3 {1 + count}\n"
            "pnnx.Input in0 0 1 0 #0=(7,1,4)f32\n"
            f"nn.LSTM op 1 {count} 0 {outputs} {params} "
            "@weight_ih_l0=(20,4)f32 @weight_hh_l0=(20,5)f32 #0=(7,1,4)f32\n"
            "pnnx.Output out 1 0 1\n")


@pytest.mark.parametrize("params, needle", [
    ("input_size=4 hidden_size=5 num_layers=0 bias=False", "num_layers must be positive"),
    ("input_size=4 hidden_size=5 proj_size=5 bias=False", "proj_size must be 0 .none. or less than hidden_size 5"),
    ("input_size=4 hidden_size=abc bias=False", "'hidden_size' is kParameterString"),
    ("input_size=4 hidden_size=5 bias=True", "missing weight attribute 'bias_ih_l0'"),
    ("input_size=4 hidden_size=5 bias=False bidirectional=True", "missing weight attribute 'weight_ih_l0_reverse'"),
    ("input_size=3 hidden_size=5 bias=False", r"'weight_ih_l0' has shape \(20, 4\), expected \(20, 3\)"),
])
def test_bad_parameters_are_refused_naming_the_operator(params, needle, tmp_path):
    path = tmp_path / "m.pnnx.param"
    path.write_text(_lstm_param(params, "1"))
    with StoreZipWriter(tmp_path / "m.pnnx.bin") as writer:
        writer.write_file("op.weight_ih_l0", np.zeros((20, 4), np.float32).tobytes())
        writer.write_file("op.weight_hh_l0", np.zeros((20, 5), np.float32).tobytes())
    with pytest.raises(LayerCreateError, match=needle) as info:
        kuiperinfer.load(path)
    assert info.value.op_name == "op"


@pytest.mark.parametrize("op_type", TYPES.values())
def test_wrong_parameter_values_load_or_fail_cleanly(op_type, tmp_path):
    """Each parameter in turn set to each wrong value of the hostile-model tests: a working
    layer or a LayerCreateError naming the operator, never a raw exception."""
    gates = {"nn.RNN": 1, "nn.GRU": 3, "nn.LSTM": 4}[op_type]
    params = {"input_size": "8", "hidden_size": "5", "num_layers": "1", "bias": "False",
              "batch_first": "False", "bidirectional": "False", "proj_size": "0", "nonlinearity": "tanh"}
    attrs = [f"@weight_ih_l0=({gates * 5},8)f32", f"@weight_hh_l0=({gates * 5},5)f32"]
    shapes = ["(1,3,8)f32"]
    for key in params:
        for value in WRONG_TYPES:
            build_one_operator(tmp_path, one_operator_model(op_type, {**params, key: value}, shapes, attrs), shapes)
