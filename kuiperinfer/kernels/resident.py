"""Packed weights in memory backed by huge pages.

A run reads every weight of a model once, and at batch 1, with megabytes of weights between
one operator's and the next time it runs, much of that comes from beyond the core's own
caches: a linear layer of a few megabytes is a stream from memory. On 4 KiB pages such a
stream needs a new address translation every 64 cache lines, and the TLB of a core covers a
few megabytes of them; on the 2 MiB pages Linux gives a mapping advised
``MADV_HUGEPAGE`` (transparent huge pages, in their ``madvise`` or ``always`` mode), one
translation covers 512 times as much. Weights packed at build (:func:`resident`) are
therefore copied into a process-wide :class:`WeightArena` of such mappings.

Measured on a 2-vCPU AMD EPYC (Zen 4), docs/performance.md: MobileNetV3-Small's classifier
read from memory 194 -> 154 us, runs of MiniLM 5-6% and of MobileNetV3-Small up to 7%
faster. Where the system gives no huge pages (another OS, transparent huge pages off), the
arena's memory is ordinary pages and only the alignment remains.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref

import numpy as np

HUGE_PAGE = 2 << 20
"""Bytes of an x86 huge page, and the alignment of each of the arena's mappings."""
CHUNK = 32 << 20
"""Bytes the arena maps at a time (a weight larger than half of it is mapped alone)."""
ALIGNMENT = 64
"""Where each weight starts: on a cache line, an AVX-512 vector, so that no load of a
strip of weights crosses two lines."""


class WeightArena:
    """Weights placed one after another in anonymous mappings of :data:`CHUNK` bytes, each
    advised ``MADV_HUGEPAGE``. An array placed there holds its mapping: the arena lets go of
    a full one, and the mapping goes once no weight in it is left (a dropped model's weights
    beside a live model's keep theirs mapped until that one goes too). Pages never written
    are never resident."""

    def __init__(self, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self._memory: np.ndarray | None = None
        self._used = 0
        self._lock = threading.Lock()

    def copy(self, values: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of ``values`` in the arena, starting at a multiple of
        :data:`ALIGNMENT` bytes."""
        values = np.asarray(values)
        nbytes = max(values.nbytes, 1)
        with self._lock:
            if nbytes > self.chunk // 2:
                memory, start = _mapping(nbytes), 0
            else:
                start = -(-self._used // ALIGNMENT) * ALIGNMENT
                if self._memory is None or start + nbytes > len(self._memory):
                    self._memory, start = _mapping(self.chunk), 0
                memory, self._used = self._memory, start + nbytes
        placed = memory[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
        placed[...] = values
        return placed


_MAPPINGS: dict[int, weakref.ref[np.ndarray]] = {}
"""The arena's mappings (as the arrays over them), by id, while they exist."""


def in_arena(array: np.ndarray) -> bool:
    """Whether ``array`` is (a view of) memory of the arena, which holds it, unlike a view of
    the model file, which the operating system's page cache holds."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    mapping = _MAPPINGS.get(id(array))
    return mapping is not None and mapping() is array


def _mapping(nbytes: int) -> np.ndarray:
    """``nbytes`` of zeroed memory starting on a huge page, advised to be backed by huge pages
    (NumPy's memory where the system maps no anonymous memory this way: Windows)."""
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    mapped = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) \
        if hasattr(mmap, "MAP_ANONYMOUS") else None
    whole = np.zeros(size + HUGE_PAGE, np.uint8) if mapped is None else np.frombuffer(mapped, np.uint8)
    _MAPPINGS[id(whole)] = weakref.ref(whole)
    weakref.finalize(whole, _MAPPINGS.pop, id(whole), None)
    start = -whole.ctypes.data % HUGE_PAGE
    if mapped is not None and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mapped.madvise(mmap.MADV_HUGEPAGE, start, size)
        except OSError:     # a kernel without transparent huge pages: ordinary pages
            pass
    return whole[start:start + size]


ARENA = WeightArena()
"""The process's arena for packed weights."""

if hasattr(os, "register_at_fork"):      # a child forked while another thread packed
    os.register_at_fork(after_in_child=lambda: setattr(ARENA, "_lock", threading.Lock()))


def resident(values: np.ndarray) -> np.ndarray:
    """``values`` copied into :data:`ARENA`: weights a kernel reads on every run, packed once."""
    return ARENA.copy(values)
