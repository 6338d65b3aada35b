"""RuntimeGraph: the executable graph built from a PNNX graph (the seeds' RuntimeGraph).

Its life has three states, as in the seeds:

``NeedInit``  -> :meth:`init` reads the .param/.bin pair into a PNNX graph and makes a
                 :class:`RuntimeOperator` (with operands, parameters and weights) for
                 each pnnx operator;
``NeedBuild`` -> :meth:`build` links operators to their consumers, creates every layer
                 through the :class:`LayerRegisterer` and fixes a topological
                 execution order;
``Complete``  -> :meth:`run` (or calling the graph) executes it.

Execution is a plain loop over the operators in topological order (torch.fx's
Interpreter is the model): :meth:`run_node` runs one operator and is the hook that
profilers and tracers override. An operand's value is dropped as soon as its last
consumer has run, and values are kept per thread, so one graph serves many threads.

Batch-parallel workers: with ``workers > 1``, a batch of several samples is cut into
``workers`` contiguous slices that run through the whole graph at once, one per thread
(NumPy releases the GIL in its kernels), with BLAS limited to one thread meanwhile; the
outputs are joined along dimension 0. This happens only when the graph is
*batch-separable*: every layer that sees a value derived from the inputs declares
:attr:`Layer.batch_independent` (sample ``i`` of its outputs depends only on sample ``i``
of its inputs). Other graphs, and batches of one, run whole in the calling thread, where
large operators share their blocks among ``workers`` threads
(:mod:`kuiperinfer.kernels.parallel`).
"""

from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from enum import IntEnum
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kuiperinfer.errors import GraphError, InferError, InputError, KuiperError, OperatorError
from kuiperinfer.kernels.parallel import INTRA_OP_THREADS, ONE_BLAS_THREAD, sharing_pays
from kuiperinfer.layers.registry import LayerRegisterer
from kuiperinfer.pnnx.ir import Graph, numpy_dtype
from kuiperinfer.runtime.attribute import RuntimeAttribute
from kuiperinfer.runtime.operand import RuntimeOperand
from kuiperinfer.runtime.operator import RuntimeOperator
from kuiperinfer.runtime.parameter import RuntimeParameter

INPUT_TYPE = "pnnx.Input"
OUTPUT_TYPE = "pnnx.Output"
TUPLE_TYPES = ("prim::TupleConstruct", "prim::ListConstruct")


class GraphState(IntEnum):
    """The seeds' graph states."""

    NeedInit = -2
    NeedBuild = -1
    Complete = 0


class RuntimeGraph:
    """A PNNX model ready to run. Usually made by :func:`kuiperinfer.load`."""

    def __init__(self, param_path: str | os.PathLike | None = None,
                 bin_path: str | os.PathLike | None = None, *, workers: int = 1,
                 max_tensor_bytes: int | None = None):
        if workers < 1:
            raise GraphError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        """Threads a batch is split over (1: every run whole in the calling thread)."""
        self.max_tensor_bytes = max_tensor_bytes
        """Largest weight or operand the model may declare (None: the reader's default)."""
        self.param_path = None if param_path is None else os.fspath(param_path)
        self.bin_path = None if bin_path is None else os.fspath(bin_path)
        self.graph_state = GraphState.NeedInit
        self.pnnx_graph: Graph | None = None
        self.operators: list[RuntimeOperator] = []
        """All operators; in topological execution order once built."""
        self.input_operators: list[RuntimeOperator] = []
        self.output_operators: list[RuntimeOperator] = []
        self.operands: dict[str, RuntimeOperand] = {}
        self._plan: list[RuntimeOperator] = []
        self._release: list[list[RuntimeOperand]] = []
        self.batch_separable = False
        """Whether slices of a batch may run through the graph separately (set by build())."""
        self.shares_operators = False
        """Whether a whole run shares its large operators' blocks among the workers (set by
        build(), see :func:`kuiperinfer.kernels.parallel.sharing_pays`)."""
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pool_lock = threading.Lock()

    # -- NeedInit -> NeedBuild -----------------------------------------------------

    def init(self, graph: Graph | None = None) -> None:
        """Read the model (or take ``graph``) and create the runtime operators."""
        if graph is None:
            if self.param_path is None:
                raise GraphError("RuntimeGraph.init() needs a param path or a pnnx Graph")
            graph = Graph.load(self.param_path, self.bin_path, max_tensor_bytes=self.max_tensor_bytes)
        self.pnnx_graph = graph
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
            runtime_operand = RuntimeOperand(operand.name, list(operand.shape), operand.type, op.name)
            self.operands[operand.name] = runtime_operand
            op.output_operands.append(runtime_operand)
        names = list(getattr(pnnx_op, "inputnames", []) or [])
        for i, operand in enumerate(pnnx_op.inputs):
            runtime_operand = self.operands.get(operand.name)
            if runtime_operand is None:
                raise GraphError(f"{self._where(op)}: input operand {operand.name!r} is not produced "
                                 f"by any earlier operator")
            runtime_operand.consumers.append(op.name)
            op.input_operands_seq.append(runtime_operand)
            op.input_operands.setdefault(runtime_operand.producer, []).append(runtime_operand)
            op.input_names.append(names[i] if i < len(names) else "")

    # -- NeedBuild -> Complete -----------------------------------------------------

    def build(self) -> None:
        """Create the layers, link the operators and fix the execution order."""
        if self.graph_state == GraphState.NeedInit:
            self.init()
        by_name = {op.name: op for op in self.operators}
        for op in self.operators:
            consumers = [name for operand in op.output_operands for name in operand.consumers]
            op.output_names = list(dict.fromkeys(consumers))
            op.output_operators = {name: by_name[name] for name in op.output_names}
        for op in self.operators:
            if op.type not in (INPUT_TYPE, OUTPUT_TYPE):
                op.layer = LayerRegisterer.create_layer(op)
        self.operators = self._topological_order()
        for index, op in enumerate(self.operators):
            op.forward_index = index
        self._plan = [op for op in self.operators if op.layer is not None]
        self._release = self._release_plan(self._plan)
        self.batch_separable = self._is_batch_separable()
        self.shares_operators = self._operators_worth_sharing()
        self.graph_state = GraphState.Complete

    def _topological_order(self) -> list[RuntimeOperator]:
        """Depth-first post-order from every source, reversed (as the seeds do), iteratively."""
        order: list[RuntimeOperator] = []
        state: dict[str, int] = {}  # 1 = on the DFS stack, 2 = finished
        for root in self.operators:
            if root.name in state:
                continue
            stack = [(root, iter(root.output_operators.values()))]
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
                        stack.append((nxt, iter(nxt.output_operators.values())))
                        break
                else:
                    stack.pop()
                    state[op.name] = 2
                    order.append(op)
        order.reverse()
        return order

    def _release_plan(self, plan: list[RuntimeOperator]) -> list[list[RuntimeOperand]]:
        """For each step, the operands whose last consumer is that step."""
        keep = {id(o) for o in self.graph_output_operands()}
        last_use: dict[int, int] = {}
        for step, op in enumerate(plan):
            for operand in op.input_operands_seq:
                last_use[id(operand)] = step
        release: list[list[RuntimeOperand]] = [[] for _ in plan]
        for operand in self.operands.values():
            step = last_use.get(id(operand))
            if step is not None and id(operand) not in keep:
                release[step].append(operand)
        return release

    def _operators_worth_sharing(self) -> bool:
        """Whether most of the model's work, as pnnx recorded its shapes, is in large operators."""
        if self.pnnx_graph is None:
            return False
        from kuiperinfer.inspect.summary import summarize   # (inspect imports the runtime)
        return sharing_pays(op.macs or 0 for op in summarize(self.pnnx_graph).operators)

    def _is_batch_separable(self) -> bool:
        """True when every value derived from the inputs keeps the samples apart.

        Values computed from constants alone are the same in every slice; a layer that
        reads a batched value must declare ``batch_independent``; and every graph output
        must be batched, so that the slices' outputs can be joined along dimension 0.
        """
        batched = {id(o) for o in self.graph_input_operands()}
        if not batched:
            return False
        for op in self._plan:
            if not any(id(o) in batched for o in op.input_operands_seq):
                continue
            if not op.layer.batch_independent:
                return False
            batched.update(id(o) for o in op.output_operands)
        return all(id(o) in batched for o in self.graph_output_operands())

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
        producer = next(op for op in self.operators if op.name == operand.producer)
        if producer.type in TUPLE_TYPES:
            return [n for o in producer.input_operands_seq for n in self._unpacked_names(o)]
        return [operand.name]

    def _bind_inputs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
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
        return [self._checked_input(names[i], operand, value)
                for i, (operand, value) in enumerate(zip(operands, values))]

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
        if array.dtype.kind not in "biuf":
            raise InputError(f"input {name!r} has non-numeric dtype {array.dtype}", name)
        expected = tuple(operand.shapes)
        if expected:
            mismatch = array.ndim != len(expected) or any(
                e != -1 and a != e for i, (e, a) in enumerate(zip(expected, array.shape)) if i > 0)
            if mismatch:
                raise InputError(f"input {name!r} has shape {array.shape}, the model expects "
                                 f"{_shape_text(expected)} (any batch size)", name, expected, array.shape)
            if array.shape[0] == 0:
                raise InputError(f"input {name!r} has batch size 0 (shape {array.shape})",
                                 name, expected, array.shape)
        dtype = numpy_dtype(operand.type) or np.float32
        return np.asarray(array, dtype=dtype)

    # -- execution -----------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> list[np.ndarray]:
        """Run the graph; inputs positionally and/or by name. Returns every output, in order."""
        if self.graph_state != GraphState.Complete:
            raise GraphError(f"the graph is in state {self.graph_state.name}; call build() first")
        if len(args) == 1 and isinstance(args[0], Mapping):
            kwargs, args = {**args[0], **kwargs}, ()
        elif len(args) == 1 and isinstance(args[0], (list, tuple)) and len(self.input_operators) > 1:
            args = tuple(args[0])
        return self._execute(self._bind_inputs(args, kwargs))

    def warm_up(self) -> bool:
        """Run the graph once on zeros of its declared input shapes and discard the result.

        A graph's first run pays one-off costs that later runs do not: the memory its
        values take (which an optimised load's allocator keeps for the next run), BLAS's
        buffers, the intra-op helper thread. Warming up pays them now, so the first real
        call is as fast and adds as little memory as any other. It goes around
        :meth:`run`, so a profiling graph does not record it. Returns False, without
        running, when an input's shape is not fully declared.
        """
        if self.graph_state != GraphState.Complete:
            raise GraphError(f"the graph is in state {self.graph_state.name}; call build() first")
        operands = self.graph_input_operands()
        if not operands or any(not o.shapes or min(o.shapes) < 1 for o in operands):
            return False
        zeros = [np.zeros(o.shapes, numpy_dtype(o.type) or np.float32) for o in operands]
        with np.errstate(all="ignore"):  # zeros may divide by zero where real inputs do not
            self._execute(zeros)
        return True

    def _execute(self, values: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run checked input values: split over the workers or whole; row-major outputs."""
        slices = self._batch_slices(values)
        if len(slices) >= 2:
            outputs = self._run_split(values, slices)
        else:
            outputs = self._run_whole(values)
        return [_row_major(output) for output in outputs]

    def _run_pass(self, values: Sequence[np.ndarray]) -> list[Any]:
        """One pass of the plan over ``values`` in this thread; the flattened outputs."""
        for operand, value in zip(self.graph_input_operands(), values):
            operand.data = value
        try:
            for op, released in zip(self._plan, self._release):
                self.run_node(op)
                for operand in released:
                    operand.data = None
            results = [operand.data for operand in self.graph_output_operands()]
        finally:
            for operand in self.operands.values():
                operand.data = None
        return list(_flatten(results))

    def _run_whole(self, values: Sequence[np.ndarray]) -> list[Any]:
        """The whole batch in this thread: in a graph of large operators, they share their
        blocks among the workers, BLAS single-threaded; otherwise BLAS has the cores."""
        if self.workers < 2 or not self.shares_operators:
            return self._run_pass(values)
        token = INTRA_OP_THREADS.set(self.workers)
        try:
            with ONE_BLAS_THREAD:
                return self._run_pass(values)
        finally:
            INTRA_OP_THREADS.reset(token)

    def _batch_slices(self, values: Sequence[np.ndarray]) -> list[slice]:
        """Contiguous slices of the batch for the workers ([] when the run stays whole)."""
        if self.workers < 2 or not self.batch_separable:
            return []
        if any(v.ndim == 0 for v in values) or len({v.shape[0] for v in values}) != 1:
            return []
        batch = values[0].shape[0]
        parts = min(self.workers, batch)
        if parts < 2:
            return []
        bounds = [batch * i // parts for i in range(parts + 1)]
        return [slice(start, stop) for start, stop in zip(bounds, bounds[1:])]

    def _run_split(self, values: Sequence[np.ndarray], slices: list[slice]) -> list[np.ndarray]:
        """Run the slices concurrently (the first in this thread) and join the outputs."""
        pool = self._worker_pool()
        with ONE_BLAS_THREAD:
            # each slice runs in a copy of the caller's context, so context variables (a
            # profiler's current run, say) follow the work into the worker threads
            futures = [pool.submit(contextvars.copy_context().run, self._run_pass, [v[part] for v in values])
                       for part in slices[1:]]
            try:
                first = self._run_pass([v[slices[0]] for v in values])
            finally:
                wait(futures)   # no slice outlives the run, even when one fails
        pieces = [first] + [future.result() for future in futures]
        joined = []
        for name, outputs in zip(self.output_names, zip(*pieces)):
            if any(np.ndim(o) == 0 for o in outputs):
                raise InferError(f"output {name!r} has no batch dimension to join the workers' "
                                 f"slices on; load the model with workers=1")
            joined.append(np.concatenate(outputs, axis=0))
        return joined

    def _worker_pool(self) -> ThreadPoolExecutor:
        """The graph's persistent threads for the slices after the first (made on first use)."""
        with self._pool_lock:
            if self._pool is None or self._pool_size != self.workers - 1:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool_size = self.workers - 1
                self._pool = ThreadPoolExecutor(self._pool_size, thread_name_prefix="kuiper-worker")
            return self._pool

    def run_node(self, op: RuntimeOperator) -> None:
        """Run one operator. Override to trace, profile or check; call super() to compute."""
        try:
            op.layer.forward_operator()
        except OperatorError as exc:
            if exc.op_name is None:
                raise InferError(exc.reason, op.name, op.type, exc.status) from exc
            raise
        except KuiperError as exc:  # e.g. an ExpressionError: say which operator it came from
            raise InferError(str(exc), op.name, op.type) from exc
        except Exception as exc:
            shapes = ", ".join(_shape_text(np.shape(o.data)) for o in op.input_operands_seq)
            raise InferError(f"{type(exc).__name__}: {exc} (input shapes: {shapes})",
                             op.name, op.type) from exc

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


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ",".join("?" if d == -1 else str(d) for d in shape) + ")"
