"""Keep freed memory in the process for the next inference: glibc's malloc, tuned once.

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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading

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
