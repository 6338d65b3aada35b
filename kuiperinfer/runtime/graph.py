"""RuntimeGraph: the executable graph built from a PNNX graph (KuiperInfer's RuntimeGraph).

Its life has three states, as in KuiperInfer:

``NeedInit``  -> :meth:`init` reads the .param/.bin pair into a PNNX graph and makes a
                 :class:`RuntimeOperator` (with operands, parameters and weights) for
                 each pnnx operator;
``NeedBuild`` -> :meth:`build` links operators to their consumers, creates every layer
                 through the :class:`LayerRegisterer` and fixes a topological
                 execution order;
``Complete``  -> :meth:`run` (or calling the graph) executes it.

Execution is a plain loop over the operators in topological order (torch.fx's
Interpreter is the model). The run owns its values: an environment from operand to
value, local to the run, from which the loop hands each layer its inputs and into which
it puts the outputs; a value leaves it after its last reader has run, unless the caller
asked for it (``run(..., fetch=[...])``). :meth:`run_node` runs one operator on its input
values and is the hook that profilers and tracers override. Nothing of a run is stored on
the graph, so one graph serves many threads.

Batches: :meth:`build` works out once whether the graph's samples are independent along
dimension 0 and at which batch sizes it runs (:attr:`batching`,
:mod:`kuiperinfer.runtime.batching`). A constant that pnnx folded from the traced batch
(an expanded class token) follows the batch of each call where its rows are equal, and
fixes the batch where they are not.

Threads: a run uses the threads of the graph's :class:`~kuiperinfer.kernels.parallel.ThreadPool`
(``threads`` of them, the caller's and the pool's helpers), with BLAS limited to one thread. A batch of several
samples is cut into chunks of contiguous samples, one per thread, that the threads take as
they come free, each running a chunk through the whole graph; the outputs are joined along
dimension 0. This happens only when the graph is batch-independent. Other graphs, and
batches of one, run whole in the calling thread, where each large operator shares its
parts among the threads.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from typing import Any

import numpy as np

from kuiperinfer.errors import (
    CalibrationError,
    GraphError,
    InferError,
    InputError,
    KuiperError,
)
from kuiperinfer.kernels.parallel import ThreadPool, one_thread
from kuiperinfer.pnnx.dtypes import numpy_dtype
from kuiperinfer.pnnx.ir import INPUT_TYPE, OUTPUT_TYPE, Graph, shape_text
from kuiperinfer.pnnx.loading import load_graph
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.batching import Batching, analyse
from kuiperinfer.runtime.calibration import CalibrationTable, model_digest
from kuiperinfer.runtime.memory import release_file_pages
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.options import LoadOptions
from kuiperinfer.runtime.parameter import RuntimeParameter
from kuiperinfer.runtime.plan import RunPlan, failure
from kuiperinfer.runtime.registry import LayerRegisterer

TUPLE_TYPES = ("prim::TupleConstruct", "prim::ListConstruct")


class GraphState(IntEnum):
    """KuiperInfer's graph states."""

    NeedInit = -2
    NeedBuild = -1
    Complete = 0


class RuntimeGraph:
    """A PNNX model ready to run. Usually made by :func:`kuiperinfer.load`."""

    def __init__(self, param_path: str | os.PathLike | None = None,
                 bin_path: str | os.PathLike | None = None, options: LoadOptions | None = None, **values: Any):
        self.options = LoadOptions.of(options, **values)
        """The load options, checked and resolved (:class:`~kuiperinfer.runtime.options.LoadOptions`;
        keywords replace fields of ``options``)."""
        self.pool = self.options.pool or ThreadPool(self.options.threads, self.options.spin, pin=self.options.pin)
        """The threads the runs use: the graph's own, or one it shares with other graphs."""
        self.precision = self.options.products()
        """What the products compute and how this machine computes it
        (:mod:`kuiperinfer.kernels.matrix.precision`)."""
        self.param_path = None if param_path is None else os.fspath(param_path)
        self.bin_path = None if bin_path is None else os.fspath(bin_path)
        self.graph_state = GraphState.NeedInit
        self.operators: list[RuntimeOperator] = []
        """All operators; in topological execution order once built."""
        self.input_operators: list[RuntimeOperator] = []
        self.output_operators: list[RuntimeOperator] = []
        self.operands: dict[str, RuntimeOperand] = {}
        self._plan: list[RuntimeOperator] = []
        """The operators that compute, in execution order."""
        self._run_plan = RunPlan((), (), ())
        """The plan's steps over numbered slots (:mod:`kuiperinfer.runtime.plan`), bound by build()."""
        self._hooked = type(self).run_node is not RuntimeGraph.run_node
        """Whether a subclass overrides :meth:`run_node`, which every step then goes through."""
        self.batching = Batching(False, "the graph is not built")
        """Whether the samples are independent and which batch sizes run (set by build())."""

    # -- NeedInit -> NeedBuild -----------------------------------------------------

    def init(self, graph: Graph | None = None) -> None:
        """Read the model (or take ``graph``) and create the runtime operators."""
        if graph is None:
            if self.param_path is None:
                raise GraphError("RuntimeGraph.init() needs a param path or a pnnx Graph")
            graph = load_graph(self.param_path, self.bin_path, max_tensor_bytes=self.options.max_tensor_bytes)
        self.operators, self.operands = [], {}
        for pnnx_op in graph.ops:
            op = RuntimeOperator(pnnx_op.name, pnnx_op.type, pnnx_op.line or None)
            self._init_operands(pnnx_op, op)
            op.params = {k: RuntimeParameter.from_pnnx(p) for k, p in pnnx_op.params.items()}
            op.attribute = {k: RuntimeAttribute(a) for k, a in pnnx_op.attrs.items()}
            self.operators.append(op)
        self.input_operators = [op for op in self.operators if op.type == INPUT_TYPE]
        self.output_operators = [op for op in self.operators if op.type == OUTPUT_TYPE]
        if not self.output_operators:
            raise GraphError(f"{self._where()}: the graph has no pnnx.Output operator")
        self.graph_state = GraphState.NeedBuild

    def _init_operands(self, pnnx_op: Any, op: RuntimeOperator) -> None:
        for operand in pnnx_op.outputs:
            runtime_operand = RuntimeOperand(operand.name, list(operand.shape), operand.type, op)
            self.operands[operand.name] = runtime_operand
            op.output_operands.append(runtime_operand)
        names = list(getattr(pnnx_op, "inputnames", []) or [])
        for i, operand in enumerate(pnnx_op.inputs):
            runtime_operand = self.operands.get(operand.name)
            if runtime_operand is None:
                raise GraphError(f"{self._where(op)}: input operand {operand.name!r} is not produced "
                                 f"by any earlier operator")
            runtime_operand.consumers.append(op)
            op.input_operands_seq.append(runtime_operand)
            op.input_names.append(names[i] if i < len(names) else "")

    def check(self) -> None:
        """Raise GraphError unless the graph's links are consistent: every operand is in
        :attr:`operands` under its name, produced by an operator of the graph that lists it
        among its outputs, and read by exactly the operators (as often as they) list it among
        their inputs; every operator has a pnnx name per input; names are unique."""
        where = self._where()
        names = [op.name for op in self.operators]
        if len(set(names)) != len(names):
            raise GraphError(f"{where}: operator names repeat")
        present = {id(op) for op in self.operators}
        readers: dict[int, list[int]] = {id(o): [] for o in self.operands.values()}
        for op in self.operators:
            if len(op.input_names) != len(op.input_operands_seq):
                raise GraphError(f"{where}: operator {op.name!r} has {len(op.input_operands_seq)} inputs "
                                 f"and {len(op.input_names)} input names")
            for operand in op.input_operands_seq:
                if self.operands.get(operand.name) is not operand:
                    raise GraphError(f"{where}: operator {op.name!r} reads {operand.name!r}, which is "
                                     f"not an operand of the graph")
                readers[id(operand)].append(id(op))
            for operand in op.output_operands:
                if self.operands.get(operand.name) is not operand or operand.producer is not op:
                    raise GraphError(f"{where}: operator {op.name!r} writes {operand.name!r}, whose "
                                     f"producer is {operand.producer!r}")
        for name, operand in self.operands.items():
            if operand.name != name or id(operand.producer) not in present or \
                    all(o is not operand for o in operand.producer.output_operands):
                raise GraphError(f"{where}: operand {name!r} has no producer in the graph")
            if sorted(map(id, operand.consumers)) != sorted(readers[id(operand)]):
                raise GraphError(f"{where}: operand {name!r} lists consumers "
                                 f"{[op.name for op in operand.consumers]} that do not read it as often")

    # -- NeedBuild -> Complete -----------------------------------------------------

    def build(self) -> None:
        """Create the layers, link the operators and fix the execution order."""
        if self.graph_state == GraphState.NeedInit:
            self.init()
        self.check()
        calibration = self.options.calibration
        if calibration is not None:
            self._check_calibrated_model(calibration)
        options = self.options.build()
        for op in self.operators:
            if op.type not in (INPUT_TYPE, OUTPUT_TYPE):
                op.layer = LayerRegisterer.create_layer(op, options)
        if calibration is not None:
            self._check_calibration(calibration)
        self.operators = self._topological_order()
        self._plan = [op for op in self.operators if op.layer is not None]
        self.batching = analyse(self.graph_input_operands(), self._plan, self.graph_output_operands(),
                                self._constant_value)
        self._run_plan = RunPlan(self._plan, self.graph_input_operands(), self.graph_output_operands(),
                                 self.batching.carriers)
        release_file_pages(a.attribute.data for op in self.operators for a in op.attribute.values())
        self.graph_state = GraphState.Complete

    def _check_calibrated_model(self, calibration: CalibrationTable) -> None:
        if self.param_path is not None and calibration.model != model_digest(self.param_path):
            raise CalibrationError("the calibration table was made on another model (its 'model' digest is "
                                   "not this .param file's): calibrate this model with `kuiper quantize`",
                                   self.param_path)

    def _check_calibration(self, calibration: CalibrationTable) -> None:
        """Every product int8 computes in the table, and no other."""
        products = {name: op for op in self.operators for name in getattr(op.layer, "products", ())}
        if not products:
            raise CalibrationError("the model has no operator int8 computes (convolutions, linear layers): "
                                   "load it in fp32 or bf16", self.param_path)
        missing = [f"{name!r} ({op.type})" for name, op in products.items() if name not in calibration.names]
        unknown = sorted(calibration.names - products.keys())
        if missing or unknown:
            said = f"no range for {', '.join(missing[:5])}" if missing else \
                f"ranges for operators this model does not quantize: {', '.join(map(repr, unknown[:5]))}"
            raise CalibrationError(f"the calibration table does not fit this model: {said}; calibrate it "
                                   f"with `kuiper quantize`", self.param_path)

    def _topological_order(self) -> list[RuntimeOperator]:
        """Depth-first post-order from every source, reversed (as KuiperInfer does), iteratively."""
        order: list[RuntimeOperator] = []
        state: dict[str, int] = {}  # 1 = on the DFS stack, 2 = finished
        for root in self.operators:
            if root.name in state:
                continue
            stack = [(root, iter(root.output_operators))]
            state[root.name] = 1
            while stack:
                op, successors = stack[-1]
                for nxt in successors:
                    mark = state.get(nxt.name)
                    if mark == 1:
                        raise GraphError(f"{self._where(nxt)}: the graph has a cycle through "
                                         f"operator {nxt.name!r} ({nxt.type})")
                    if mark is None:
                        state[nxt.name] = 1
                        stack.append((nxt, iter(nxt.output_operators)))
                        break
                else:
                    stack.pop()
                    state[op.name] = 2
                    order.append(op)
        order.reverse()
        return order

    def _constant_value(self, operand: RuntimeOperand) -> Any:
        """The value of an operand computed from constants alone, by its producers."""
        needed: set[int] = set()
        pending = [operand.producer]
        while pending:
            op = pending.pop()
            if id(op) not in needed:
                needed.add(id(op))
                pending.extend(o.producer for o in op.input_operands_seq)
        env: dict[RuntimeOperand, Any] = {}
        for op in self._plan:
            if id(op) in needed:
                inputs = [env[o] for o in op.input_operands_seq]
                env.update(zip(op.output_operands, RuntimeGraph.run_node(self, op, inputs)))
        return env[operand]

    # -- inputs and outputs --------------------------------------------------------

    def graph_input_operands(self) -> list[RuntimeOperand]:
        return [op.output_operands[0] for op in self.input_operators]

    def graph_output_operands(self) -> list[RuntimeOperand]:
        return [operand for op in self.output_operators for operand in op.input_operands_seq]

    @property
    def input_names(self) -> list[str]:
        """Names of the graph inputs (the pnnx.Input operators), in order."""
        return [op.name for op in self.input_operators]

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Declared input shapes (-1 for an unknown dimension)."""
        return [tuple(o.shapes) for o in self.graph_input_operands()]

    @property
    def output_names(self) -> list[str]:
        """Names of the graph outputs: the operands reaching pnnx.Output, tuples unpacked."""
        names: list[str] = []
        for operand in self.graph_output_operands():
            names.extend(self._unpacked_names(operand))
        return names

    def _unpacked_names(self, operand: RuntimeOperand) -> list[str]:
        producer = operand.producer
        if producer.type in TUPLE_TYPES:
            return [n for o in producer.input_operands_seq for n in self._unpacked_names(o)]
        return [operand.name]

    def _bind_inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                     any_batch: bool = False) -> list[np.ndarray]:
        """The inputs checked against the model's, by position or name; ``any_batch`` lets a
        batch other than a fixed one through (:meth:`run_samples` cuts it to size)."""
        operands = self.graph_input_operands()
        names = self.input_names
        if len(args) > len(operands):
            raise InputError(f"the model takes {len(operands)} input(s) {names}, got {len(args)}")
        values: list[Any] = list(args) + [None] * (len(operands) - len(args))
        for key, value in kwargs.items():
            index = self._input_index(key)
            if values[index] is not None:
                raise InputError(f"input {key!r} given twice", key)
            values[index] = value
        missing = [names[i] for i, v in enumerate(values) if v is None]
        if missing:
            raise InputError(f"missing input(s) {missing}; the model takes {names}", missing[0])
        checked = [self._checked_input(names[i], operand, value)
                   for i, (operand, value) in enumerate(zip(operands, values))]
        fixed = None if any_batch else self.batching.batch
        for name, operand, value in zip(names, operands, checked):
            if fixed is not None and value.ndim and value.shape[0] != fixed:
                raise InputError(f"input {name!r} has batch size {value.shape[0]}, but the model runs only at "
                                 f"batch {fixed}: {self.batching.fixed_by}; export it with a dynamic batch "
                                 f"(pnnx's inputshape2) to run other sizes", name, tuple(operand.shapes), value.shape)
        return checked

    def _input_index(self, key: str) -> int:
        for i, (op, operand) in enumerate(zip(self.input_operators, self.graph_input_operands())):
            if key in (op.name, operand.name):
                return i
        raise InputError(f"unknown input {key!r}; the model's inputs are {self.input_names}", key)

    @staticmethod
    def _checked_input(name: str, operand: RuntimeOperand, value: Any) -> np.ndarray:
        array = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
        try:
            array = np.asarray(array)
        except Exception as exc:
            raise InputError(f"input {name!r} cannot be read as an array: {exc}", name) from exc
        if array.dtype.kind not in "biufc":
            raise InputError(f"input {name!r} has non-numeric dtype {array.dtype}", name)
        dtype = np.dtype(numpy_dtype(operand.type) or np.float32)
        if array.dtype.kind == "c" and dtype.kind != "c":
            raise InputError(f"input {name!r} is complex ({array.dtype}), the model expects {dtype} values", name)
        expected = tuple(operand.shapes)
        if expected:
            mismatch = array.ndim != len(expected) or any(
                e != -1 and a != e for i, (e, a) in enumerate(zip(expected, array.shape)) if i > 0)
            if mismatch:
                raise InputError(f"input {name!r} has shape {array.shape}, the model expects "
                                 f"{shape_text(expected)} (only dimension 0, the batch, may differ)",
                                 name, expected, array.shape)
            if array.shape[0] == 0:
                raise InputError(f"input {name!r} has batch size 0 (shape {array.shape})",
                                 name, expected, array.shape)
        return np.asarray(array, dtype=dtype)

    # -- execution -----------------------------------------------------------------

    def run(self, *args: Any, fetch: Iterable[str] | None = None, **kwargs: Any) -> Any:
        """Run the graph; inputs positionally and/or by name. Returns every output, in order.

        ``fetch`` asks for values inside the graph instead, to compare a model with PyTorch
        layer by layer: operand names (as in the ``.param`` file) and operator names (their
        output; a tuple for several). The result is then a dict from each name to its value,
        and the run goes whole in the calling thread. The optimiser merges operators, so
        some values pnnx wrote do not exist in an optimised graph: load with
        ``optimize=False`` to fetch any of them (:attr:`value_names` lists what there is).
        An input named ``fetch`` is given positionally or in a dict.
        """
        if self.graph_state != GraphState.Complete:
            raise GraphError(f"the graph is in state {self.graph_state.name}; call build() first")
        if len(args) == 1 and isinstance(args[0], Mapping):
            kwargs, args = {**args[0], **kwargs}, ()
        elif len(args) == 1 and isinstance(args[0], (list, tuple)) and len(self.input_operators) > 1:
            args = tuple(args[0])
        values = self._bind_inputs(args, kwargs)
        if fetch is None:
            return self._execute(values)
        return self._fetch(values, [fetch] if isinstance(fetch, str) else list(fetch))

    def run_samples(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run a stack of separate samples (the rows of a dataset, images to classify) so
        that each one's outputs are what it gives alone; the outputs joined along dimension 0.

        A batch-independent graph runs them in one :meth:`run`; one whose samples mix, or
        that runs only at batch 1, runs them one at a time. A graph that runs only at a
        larger batch gives each position of that batch its own constant: a sample has no
        result of its own there, and InputError says so (call :meth:`run` with whole batches).
        """
        if len(args) == 1 and isinstance(args[0], Mapping):
            kwargs, args = {**args[0], **kwargs}, ()
        values = self._bind_inputs(args, kwargs, any_batch=True)
        batching = self.batching
        if batching.batch is not None and batching.batch > 1:
            raise InputError(f"the model runs only at batch {batching.batch}: {batching.fixed_by}; a sample has "
                             f"no result alone, so run whole batches of {batching.batch}")
        count = next((v.shape[0] for v in values if v.ndim), 1)
        if (batching.independent and batching.batch is None) or count == 1:
            return self._execute(values)
        pieces = []
        for row in range(count):
            outputs = self._execute([v[row:row + 1] if v.ndim else v for v in values])
            for name, output in zip(self.output_names, outputs):
                if np.ndim(output) == 0 or len(output) != 1:
                    raise InferError(f"output {name!r} has shape {np.shape(output)} for one sample, not one row: "
                                     f"the samples' outputs cannot be joined")
            pieces.append(outputs)
        return [np.concatenate(parts) for parts in zip(*pieces)]

    @property
    def value_names(self) -> list[str]:
        """The names :meth:`run` can fetch: every operand, then every operator, of the graph as built."""
        return list(self.operands) + [op.name for op in self.operators if op.output_operands]

    def warm_up(self) -> bool:
        """Run the graph once on zeros of its declared input shapes and discard the result.

        A graph's first run pays one-off costs that later runs do not: the memory its
        values take (which an optimised load's allocator keeps for the next run), BLAS's
        buffers, the intra-op helper thread, loading the compiled kernels. Warming up pays
        them now, so the first real call is as fast and adds as little memory as any other.
        A size pnnx left open (``?``, such as a dynamic batch) is taken as 1. Zeros are not
        the user's inputs: a model may compute sizes or steps from its input values, so if
        the graph cannot run on them the warm-up is skipped and the first call pays instead;
        a warm-up never makes a load fail. It goes around :meth:`run`, so a profiling graph
        does not record it. Returns whether it ran (False, without running, when an input's
        rank is not declared).
        """
        if self.graph_state != GraphState.Complete:
            raise GraphError(f"the graph is in state {self.graph_state.name}; call build() first")
        operands = self.graph_input_operands()
        if not operands or any(not o.shapes for o in operands):
            return False
        zeros = [np.zeros([max(1, size) for size in o.shapes], numpy_dtype(o.type) or np.float32) for o in operands]
        try:
            self._execute(zeros)   # which keeps quiet where zeros divide by zero
        except KuiperError:
            return False
        return True

    def _execute(self, values: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run checked input values: in chunks of the batch or whole; row-major outputs."""
        chunks = self._batch_chunks(values)
        with self._threads():
            if len(chunks) >= 2:
                outputs = self._run_chunks(values, chunks)
            else:
                outputs = list(_flatten(self._run_pass(values, None, _whole(values))))
        return [_row_major(output) for output in outputs]

    @property
    def threads(self) -> int:
        """Threads a run uses, the caller's included (1: every run in the calling thread)."""
        return self.pool.threads

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        """A run's threads, the pool's, for the kernels to share; NumPy's floating-point
        warnings off for the run (PyTorch gives inf and NaN without a word too)."""
        with self.pool.running(), np.errstate(all="ignore"):
            yield

    def _fetch(self, values: Sequence[np.ndarray], names: list[str]) -> dict[str, Any]:
        """The values of the operands and operators ``names``, from one whole run."""
        by_operator = {op.name: op for op in self.operators}
        targets: dict[str, list[RuntimeOperand]] = {}
        for name in names:
            if name in self.operands:
                targets[name] = [self.operands[name]]
            elif name in by_operator and by_operator[name].output_operands:
                targets[name] = by_operator[name].output_operands
            else:
                close = difflib.get_close_matches(name, self.value_names, n=3)
                hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
                raise GraphError(f"{self._where()}: no operand or operator {name!r} to fetch in this graph{hint}; "
                                 f"an optimised graph has merged some of pnnx's operators, load it with "
                                 f"optimize=False to fetch any value pnnx wrote")
        wanted = [operand for operands in targets.values() for operand in operands]
        with self._threads():
            found = dict(zip(map(id, wanted), self._run_pass(values, wanted, _whole(values))))
        return {name: _row_major(found[id(operands[0])]) if len(operands) == 1
                else tuple(_row_major(found[id(o)]) for o in operands) for name, operands in targets.items()}

    def _run_pass(self, values: Sequence[Any], wanted: Sequence[RuntimeOperand] | None, rows: slice) -> list[Any]:
        """One pass of the plan over the graph inputs' ``values`` (the samples ``rows`` of the
        call) in this thread, with values of its own; the values of the operands ``wanted``
        (None: the graph's outputs)."""
        plan = self._run_plan
        if wanted is None and not self._hooked and not plan.fitted:
            return plan.run(values)
        slots = plan.output_slots if wanted is None else [plan.slot_of(o) for o in wanted]
        return plan.run_hooked(values, slots, rows, self.run_node)

    def _batch_chunks(self, values: Sequence[np.ndarray]) -> list[slice]:
        """Contiguous chunks of the batch for the threads to take ([] when the run stays whole)."""
        if self.threads < 2 or not self.batching.independent:
            return []
        if any(v.ndim == 0 for v in values) or len({v.shape[0] for v in values}) != 1:
            return []
        batch = values[0].shape[0]
        parts = min(self.threads, batch)
        if parts < 2:
            return []
        bounds = [batch * i // parts for i in range(parts + 1)]
        return [slice(start, stop) for start, stop in zip(bounds, bounds[1:])]

    def _run_chunks(self, values: Sequence[np.ndarray], chunks: list[slice]) -> list[np.ndarray]:
        """Run the chunks on the run's threads, each taking the next chunk left, and join the
        outputs. Each chunk runs in a copy of the caller's context, so context variables (a
        profiler's current run, say) follow the work into the helper threads, and its
        operators keep to its thread."""
        context = contextvars.copy_context()
        pieces: list[list[Any]] = [[] for _ in chunks]

        def run_chunk(index: int) -> None:
            rows = chunks[index]
            with one_thread():
                pieces[index] = list(_flatten(self._run_pass([v[rows] for v in values], None, rows)))

        self.pool.share(range(len(chunks)), lambda index: context.copy().run(run_chunk, index), self.threads)
        names = self.output_names
        joined = []
        for index, parts in enumerate(zip(*pieces)):   # by position: a list value unpacks to several
            if any(np.ndim(o) == 0 for o in parts):
                name = repr(names[index]) if len(names) == len(pieces[0]) else f"number {index}"
                raise InferError(f"output {name} has no batch dimension to join the chunks of the "
                                 f"batch on; load the model with threads=1")
            joined.append(np.concatenate(parts, axis=0))
        return joined

    def run_node(self, op: RuntimeOperator, inputs: list[Any]) -> list[Any]:
        """Run one operator on its input values and return its output values. Override to
        trace, profile or check; call super() to compute."""
        try:
            return op.layer.forward(inputs)
        except Exception as error:
            told = failure(op, error, inputs)
            if told is error:
                raise
            raise told from error

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run like the PyTorch module: one output as an array, several as a tuple."""
        outputs = self.run(*args, **kwargs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _where(self, op: RuntimeOperator | None = None) -> str:
        where = self.param_path or "<graph>"
        if op is not None and op.line is not None:
            where += f":{op.line}"
        return where

    def __repr__(self) -> str:
        return (f"RuntimeGraph({self.param_path!r}, state={self.graph_state.name}, "
                f"operators={len(self.operators)})")


def _row_major(value: Any) -> Any:
    """An output array in row-major memory: inside the graph, convolutions hand on
    channels-last views (:mod:`kuiperinfer.kernels.layout`); callers get plain arrays."""
    if isinstance(value, np.ndarray) and value.ndim and not value.flags.c_contiguous:
        return np.ascontiguousarray(value)
    return value


def _flatten(values: Iterable[Any]) -> Iterable[Any]:
    """Unpack the tuples (prim::TupleConstruct) and lists of tensors (an Expression ``[@0,@1]``)
    that models returning several values produce."""
    for value in values:
        if isinstance(value, tuple) or (isinstance(value, list) and all(
                isinstance(v, (np.ndarray, tuple, list)) for v in value)):
            yield from _flatten(value)
        else:
            yield value


def _whole(values: Sequence[np.ndarray]) -> slice:
    """The samples of a whole call: dimension 0 of its first batched input."""
    return slice(0, next((v.shape[0] for v in values if np.ndim(v)), 1))
