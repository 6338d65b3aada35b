"""Compiled kernels: Numba, set up once for the package.

A compiled kernel is plain Python over NumPy arrays and numbers, decorated with
:func:`kernel`: Numba compiles it with ``nogil=True`` (so that the engine's threads run
kernels at once) and caches the machine code in kuiperinfer's cache directory
(:func:`kuiperinfer.settings.cache_dir`), so each kernel compiles once per machine and
later processes load it from disk. Where the cache cannot be written the kernels still
compile, in every process. Each kernel has a NumPy reference twin that
``load(..., kernels="reference")`` runs and the tests compare it with.

Where Numba cannot be imported the engine runs on the reference kernels after one
warning (:data:`AVAILABLE` is False). The first compilation in a process says so on
stderr, once: it takes seconds per kernel, and the user deserves to know why the first
load is slow.

Kernels take C-contiguous, writable arrays and plain numbers, so that every call of a
kernel hits the same compiled specialisation (Numba compiles another one for a read-only
or strided array); the callers prepare their arrays so. :func:`empty` makes their outputs
start on a cache line, and :func:`scratch` lends a thread a buffer it keeps between calls.
"""

from __future__ import annotations

import hashlib
import math
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from kuiperinfer.settings import cache_dir, writable_dir

try:
    import numba
    from numba.core import event as numba_events
except Exception as error:  # ImportError, or an llvmlite that does not load on this machine
    numba, numba_events, IMPORT_ERROR = None, None, error
else:
    IMPORT_ERROR = None

AVAILABLE = numba is not None
"""Whether the compiled kernels exist; without them layers run their NumPy references."""

NumbaType: type | tuple[()] = numba.types.Type if AVAILABLE else ()
"""The class of Numba's types (a kernel's type is an argument of the kernels that call it)."""

if AVAILABLE:
    from numba._dispatcher import compute_fingerprint as type_fingerprint
else:
    def type_fingerprint(value: object) -> bytes:
        """Without Numba no value has a type fingerprint."""
        raise NotImplementedError("no Numba")


def _sources_key() -> str:
    """A digest of every source a compiled kernel may be made of, and of Numba's version.

    Numba checks a cached kernel against its own file only, not against the files of the
    functions it inlines, so a cache per digest keeps a kernel from loading stale code
    after any of them changed (an upgrade of kuiperinfer or Numba compiles afresh)."""
    digest = hashlib.sha256(numba.__version__.encode() if numba is not None else b"")
    kernels = Path(__file__).resolve().parent
    for source in sorted([Path(__file__).resolve(), *kernels.joinpath("compiled").glob("*.py")]):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


CACHE_DIR = cache_dir("numba") / _sources_key()
"""Where Numba keeps the machine code of kuiperinfer's kernels, for these sources."""
CACHING = AVAILABLE and writable_dir(CACHE_DIR)
"""Whether compiled code is kept for later processes (False: the cache cannot be written)."""
OPTIONS = {"nogil": True, "cache": CACHING, "error_model": "numpy", "fastmath": {"contract"}}
"""Every kernel's Numba options: one set, since Numba's cache does not tell options apart.
``error_model="numpy"`` drops the division-by-zero checks; ``contract`` lets LLVM fuse a
multiply and an add, which changes results only in the last bit."""

F = TypeVar("F", bound=Callable[..., Any])
KERNELS: list[Any] = []
"""Every compiled kernel (Numba dispatchers), in the order they were defined."""
_SECONDS: dict[Any, float] = {}
"""Per kernel, the seconds compiling it took in this process (loads from the cache are not timed)."""

if not AVAILABLE:
    warnings.warn(f"Numba could not be imported ({IMPORT_ERROR}): kuiperinfer runs on its NumPy reference "
                  f"kernels, several times slower. `pip install numba` gives it its compiled kernels.",
                  RuntimeWarning, stacklevel=2)


def kernel(function: F) -> F:
    """Compile ``function`` with Numba (see the module's docstring); without Numba, return
    it unchanged, since only tests call a kernel that has no compiled form."""
    return _compile(function, OPTIONS)


def inline(function: F) -> F:
    """A function that kernels call value by value, compiled into each of them, so that
    LLVM sees through it and vectorises the caller's loop (Numba's ``inline="always"``).
    Numba copies its whole body, and those of the functions it inlines, into every call
    before dropping the branches a constant rules out: keep inlined functions small, and
    make a large one that runs once per row a :func:`kernel` of its own."""
    return _compile(function, {**OPTIONS, "cache": False, "inline": "always"})


def _compile(function: F, options: dict[str, Any]) -> F:
    if not AVAILABLE:
        return function
    saved = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(CACHE_DIR)   # read when the dispatcher picks its cache
    try:
        dispatcher = numba.njit(**options)(function)
    except RuntimeError:   # no cache location for this function's source: compile it every time
        dispatcher = numba.njit(**{**options, "cache": False})(function)
    finally:
        numba.config.CACHE_DIR = saved
    if options["cache"] is not False or "inline" not in options:
        KERNELS.append(dispatcher)
    return dispatcher


class KernelAddress:
    """A compiled kernel handed to another kernel as an argument (Numba's first-class
    functions): the :attr:`address` of its machine code for the types of ``arguments``
    (values of them) and its :attr:`type`, which the kernel taking it is given as two
    arguments and calls through :func:`function_at`. A kernel calling another by name
    compiles that one's code again inside its own (tens of seconds for the tiles); through
    its address it compiles in a second. The address goes as a plain integer, since Numba
    takes a function object apart on every call (unpickling its signature: 10-25 us of
    Python holding the GIL, more than a small part of an operator takes)."""

    def __init__(self, dispatcher: Any, *arguments: Any):
        signature = numba.types.void(*(numba.typeof(argument) for argument in arguments))
        self.type = numba.types.FunctionType(signature)
        """The kernel's type where another kernel takes it."""
        compiled = dispatcher.get_compile_result(signature)     # compiled, or loaded from the cache
        self.address: int = compiled.library.get_pointer_to_function(compiled.fndesc.llvm_cfunc_wrapper_name)
        """Where its machine code starts (its C-callable wrapper)."""


def compiled_for(dispatcher: Any, *arguments: Any) -> Callable[..., Any]:
    """The machine code of ``dispatcher`` for the types of ``arguments`` (values of them),
    compiled or loaded now and called without Numba's dispatch, which would look up the
    types of every argument again on every call."""
    return dispatcher.compile(tuple(numba.typeof(argument) for argument in arguments))


def kernel_operand(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous, writable array of its own type, as kernels take it (a copy
    only if it is not)."""
    return x if x.flags.c_contiguous and x.flags.writeable else np.require(x, x.dtype, ("C", "W"))


def kernel_array(x: np.ndarray) -> np.ndarray:
    """``x`` as the C-contiguous, writable float32 array kernels take (a copy only if it is not)."""
    return kernel_operand(np.asarray(x, np.float32))


@kernel
def data_address(x: np.ndarray) -> int:
    """Where ``x``'s data starts in memory: ``x.ctypes.data``, which costs 1.5 us in Python
    (it makes a ctypes object), 0.2 compiled."""
    return x.ctypes.data


CACHE_LINE = 64
"""Bytes of a cache line on x86 CPUs, and of an AVX-512 vector."""


def empty(shape: tuple[int, ...]) -> np.ndarray:
    """A new C-contiguous float32 array whose data starts on a cache line. NumPy's large
    arrays start 16 bytes past one, so that every vector a kernel loads along their rows
    straddles two lines, which costs a vector kernel a fifth of its speed."""
    size = math.prod(shape)
    lanes = CACHE_LINE // 4
    memory = np.empty(size + lanes, np.float32)
    start = (-data_address(memory) % CACHE_LINE) // 4
    return memory[start:start + size].reshape(shape)


_SCRATCH = threading.local()


def scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous float32 array on a cache line in memory the calling thread keeps for
    its next call, for a kernel's buffer: a fresh large array is mapped anew on every call
    and costs a page fault per 4 KiB written (a microsecond each on a virtual machine), as
    much as the kernel's work on a large image. The array is the thread's until it calls
    again: one at a time per thread."""
    size = math.prod(shape)
    memory = getattr(_SCRATCH, "memory", None)
    if memory is None or memory.size < size:
        memory = _SCRATCH.memory = empty((size,))
    return memory[:size].reshape(shape)


@dataclass(frozen=True)
class KernelStats:
    """How one kernel came to be in this process: its compiled signatures, how many were
    loaded from the cache and how many compiled here, and the seconds compiling took (a
    kernel's time includes that of the kernels it calls that compiled with it)."""

    name: str
    signatures: int
    cache_hits: int
    compiled: int
    seconds: float


def kernel_stats() -> list[KernelStats]:
    """The stats of every kernel used in this process so far."""
    stats = []
    for dispatcher in KERNELS:
        hits, misses = dispatcher.stats.cache_hits, dispatcher.stats.cache_misses
        if dispatcher.signatures:
            stats.append(KernelStats(f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}",
                                     len(dispatcher.signatures), sum(hits.values()), sum(misses.values()),
                                     _SECONDS.get(dispatcher, 0.0)))
    return stats


_announced = threading.Event()


def _announce(dispatcher: Any) -> None:
    """Say once per process that kernels are being compiled, and where they will be kept."""
    if dispatcher in KERNELS and not _announced.is_set():
        _announced.set()
        where = f"kept in {CACHE_DIR}" if CACHING else f"not kept: {CACHE_DIR} cannot be written"
        print(f"kuiperinfer: compiling kernels for this machine, once ({where})", file=sys.stderr, flush=True)


if AVAILABLE:
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def function_at(typingctx, address, function_type):  # noqa: ANN001, ANN201
        """In a kernel: the kernel whose machine code starts at ``address`` (a
        :class:`KernelAddress`'s, an integer) as a function of ``function_type`` (its
        :attr:`~KernelAddress.type`, which the kernel is given as an argument), to call."""
        kind = function_type.instance_type

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            function = cgutils.create_struct_proxy(kind)(context, builder)   # no Python object, no jit address:
            function.c_addr = builder.inttoptr(args[0], cgutils.voidptr_t)   # called through the address
            return function._getvalue()
        return kind(address, function_type), codegen

    class _CompileNotice(numba_events.Listener):
        """Announces the first compilation and times every kernel's (per thread: the
        engine's threads may compile at once)."""

        def __init__(self) -> None:
            self.started = threading.local()

        def on_start(self, event: Any) -> None:
            _announce(event.data["dispatcher"])
            self.started.__dict__[id(event.data["dispatcher"])] = time.perf_counter()

        def on_end(self, event: Any) -> None:
            dispatcher = event.data["dispatcher"]
            started = self.started.__dict__.pop(id(dispatcher), None)
            if started is not None:
                _SECONDS[dispatcher] = _SECONDS.get(dispatcher, 0.0) + time.perf_counter() - started

    numba_events.register("numba:compile", _CompileNotice())
