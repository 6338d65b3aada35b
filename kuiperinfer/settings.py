"""Where kuiperinfer keeps files on this machine, and the environment variables that move them.

``KUIPERINFER_CACHE_DIR`` names the cache directory; without it the cache is the per-user
cache directory (``$XDG_CACHE_HOME/kuiperinfer``, by default ``~/.cache/kuiperinfer``).
It holds the kernels Numba compiled for this machine (``numba/``) and models converted
to PNNX (``converted/``). Deleting it costs only the time to make them again.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VARIABLE = "KUIPERINFER_CACHE_DIR"


def cache_dir(kind: str = "") -> Path:
    """The cache directory, or its subdirectory ``kind`` (not created here)."""
    configured = os.environ.get(CACHE_DIR_VARIABLE)
    if configured:
        root = Path(configured).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kuiperinfer"
    return root / kind if kind else root


def writable_dir(path: Path) -> bool:
    """Whether ``path`` exists or can be made, and a file can be written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False
