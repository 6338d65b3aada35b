"""A one-line progress bar for the sub-commands, redrawn in place on stderr."""

from __future__ import annotations

import sys
from typing import Any, TextIO


class ProgressBar:
    """``label [########......] 12/30 unit``, redrawn on ``stream`` (stderr by default).

    Call it with (done, total) after each step, as the library's ``progress`` callbacks
    do; :meth:`close` (or leaving a ``with``) ends its line.
    """

    def __init__(self, label: str, unit: str, stream: TextIO | None = None, width: int = 30):
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {self.unit}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
