"""Class names: a text file with one label per line, line N naming class N - 1."""

from __future__ import annotations

import os
from pathlib import Path

from kuiperinfer.errors import ModelFormatError
from kuiperinfer.models import imagenet_labels_path


def load_labels(path: str | os.PathLike) -> list[str]:
    """The labels in ``path``: one per line, in class order (UTF-8; trailing blank lines ignored).

    Raises :class:`ModelFormatError` for an unreadable file, an empty one or a blank label
    in the middle (which would shift every class after it).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ModelFormatError("no such labels file", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFormatError(f"cannot read the labels file ({exc})", str(path)) from exc
    labels = [line.strip() for line in lines]
    while labels and not labels[-1]:
        labels.pop()
    if not labels:
        raise ModelFormatError("the labels file is empty", str(path))
    if "" in labels:
        raise ModelFormatError("blank label (one label per line, in class order)", str(path),
                               labels.index("") + 1)
    return labels


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k class names, in the usual class order (``"tench, Tinca tinca"``, ...)."""
    return load_labels(imagenet_labels_path())
