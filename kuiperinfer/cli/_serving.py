"""What ``kuiper serve`` and its ``--ray`` form share: the model arguments and the batcher's settings."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kuiperinfer.cli import CommandError
from kuiperinfer.models import default_model_path

RAY_SERVE_INSTALL = "pip install 'ray[serve]'"


def model_arguments(values: list[str], repository: str | None = None) -> list[tuple[str | None, Path]]:
    """``NAME=PATH`` or ``PATH`` -> (name or None, path); the bundled model when none (and no
    repository)."""
    models: list[tuple[str | None, Path]] = []
    for value in values or ([] if repository else [str(default_model_path())]):
        name, separator, path = value.partition("=")
        if not separator or "/" in name or not name:
            name, path = "", value
        if not Path(path).is_file():
            raise CommandError(f"no such model file: {path}")
        models.append((name or None, Path(path)))
    return models


def serve_settings(args: argparse.Namespace) -> Any:
    from kuiperinfer.serve import ServeSettings

    return ServeSettings(max_batch_size=args.max_batch_size, batch_window=args.batch_window_ms / 1000,
                         max_queue=args.max_queue, max_body_bytes=int(args.max_body_mb * 1024 * 1024))
