"""The process's memory: freed memory kept for the next inference (glibc's malloc, tuned
once, on request), and the model file's pages let go once the layers have packed their
weights.

Every run allocates and frees the same large arrays: activations, im2col columns,
Winograd tiles. glibc serves blocks above its mmap threshold (128 KB at first) with
fresh pages from the operating system and gives them back on free, and trims its heaps
of freed memory, so the next run faults every page in again and the kernel zero-fills
it. Two settings stop it, as an inference arena would:

* ``M_MMAP_THRESHOLD`` 32 MiB: blocks up to that size come from the heaps (and return
  to them), not from fresh mappings;
* ``M_TRIM_THRESHOLD`` at its maximum: freed heap memory stays in the process.

Either alone makes things worse (setting one switches off glibc's adaptive thresholds);
together they remove the page faults at the same peak resident memory
(``docs/performance.md`` has the measurements: EfficientNet-Lite0 at batch 1 took 752 page
faults a run without them, and 10-30% longer). ``kuiperinfer.load`` applies them unless told
``keep_freed_memory=False``: they are process-wide (other code in the process keeps its freed
memory too, and glibc no longer adapts its thresholds). Without glibc this does nothing.

The weights are read from the memory-mapped ``.pnnx.bin``; packing them touches every
page of it, which then counts in the process's resident memory beside the packed forms
(int8's quarter of the size, say). :func:`release_file_pages` lets those pages go
(``madvise(MADV_DONTNEED)`` on the read-only file mapping): they stay in the operating
system's page cache, and a weight read again, a layer's ``weights()``, brings its pages back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import threading
from collections.abc import Iterable

import numpy as np

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
"""glibc's largest mmap threshold on 64-bit systems."""
TRIM_THRESHOLD_BYTES = (1 << 31) - 1

_lock = threading.Lock()
_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Tune glibc's malloc (once per process) to keep freed memory for reuse; whether it is."""
    global _applied
    with _lock:
        if _applied is None:
            _applied = False
            if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
                libc = ctypes.CDLL(ctypes.util.find_library("c"))
                _applied = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
        return _applied


def release_file_pages(buffers: Iterable[object]) -> int:
    """Let the whole pages under ``buffers``, zero-copy views of a memory-mapped file (the
    model's weights), leave the process's resident set; any other buffer is left alone.
    Returns the bytes let go (0 where the system cannot)."""
    ranges = sorted((address, address + len(view)) for view in buffers
                    if isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap) and len(view)
                    for address in [_address(view)])
    if not ranges or platform.system() != "Linux":
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released, page = 0, mmap.PAGESIZE
    for start, stop in _merged(ranges):
        first, last = -(-start // page) * page, stop // page * page
        if last > first and libc.madvise(first, last - first, MADV_DONTNEED) == 0:
            released += last - first
    return released


MADV_DONTNEED = 4


def _address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged = [ranges[0]]
    for start, stop in ranges[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged
