"""``--ray`` for ``kuiper classify`` and ``kuiper run``: the options, the connection to the
cluster, reading the data and writing one results file.

Ray is imported only once ``--ray`` is given, so that the commands work without the extra.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import kuiperinfer
from kuiperinfer.cli import CommandError
from kuiperinfer.cli._common import load_options, model_path, positive_int
from kuiperinfer.vision import Classification, Classifier, Prediction, find_images

INSTALL = "pip install 'kuiperinfer[ray]'"
GLOB_CHARACTERS = "*?["


def add_ray_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``--ray``, ``--address`` and ``--actors``, in a group of their own (returned)."""
    group = parser.add_argument_group("on a Ray cluster (needs the extra: " + INSTALL + ")")
    group.add_argument("--ray", action="store_true",
                       help="run as a Ray Data job, on the cluster --address names or, without it, "
                            "as ray.init() finds one (RAY_ADDRESS, a cluster started on this "
                            "machine, else a new local one that ends with the command)")
    group.add_argument("--address", metavar="auto|ray://HOST:PORT",
                       help="the Ray cluster: auto for the one this machine belongs to, "
                            "ray://HOST:PORT through Ray Client")
    group.add_argument("--actors", type=positive_int, metavar="N",
                       help="model actors (default: one per node); each runs on as many threads "
                            "as the CPUs it reserves, its node's CPUs divided among its actors "
                            "(unless --threads says otherwise)")
    return group


def check_ray_arguments(args: argparse.Namespace, *ray_only: str) -> None:
    """CommandError for options that only mean something with ``--ray``, or for ``--ray``
    without Ray Data installed."""
    if args.ray:
        _import_ray()
        return
    given = [f"--{name}" for name in ("address", "actors", *ray_only) if getattr(args, name) is not None]
    if given:
        raise CommandError(f"{', '.join(given)} only with --ray")


def check_output(path: str) -> None:
    """CommandError unless ``path`` is a .parquet or .jsonl file in an existing folder."""
    if Path(path).suffix.lower() not in (".parquet", ".jsonl"):
        raise CommandError(f"--output {path}: write .parquet or .jsonl (the suffix says which)")
    if not Path(path).resolve().parent.is_dir():
        raise CommandError(f"--output {path}: no such folder {Path(path).parent}")


@contextlib.contextmanager
def ray_session(args: argparse.Namespace, ordered: bool = False) -> Iterator[ModuleType]:
    """:mod:`kuiperinfer.ray`, with Ray connected as ``--address`` says, or as ray.init()
    finds a cluster without it. A process already connected keeps its connection; one made
    here ends with the block (and a local cluster started for it with it). ``ordered``
    keeps the rows in the order they were read; Ray's progress bars follow ``--progress``.
    """
    ray, kray = _import_ray()
    context = ray.data.DataContext.get_current()
    settings = context.enable_progress_bars, context.execution_options.preserve_order
    progress = getattr(args, "progress", None)
    context.enable_progress_bars = sys.stderr.isatty() if progress is None else progress
    context.execution_options.preserve_order = ordered
    # Ray Data's log of each execution (plan, start, end) stays in the session's log files
    loggers = {name: logging.getLogger(name) for name in ("ray.data", "ray.data._internal.progress")}
    levels = {name: logger.level for name, logger in loggers.items()}
    loggers["ray.data"].setLevel(logging.WARNING)
    loggers["ray.data._internal.progress"].setLevel(logging.ERROR)   # its notices about the bars
    connected_here = not ray.is_initialized()
    address = args.address or os.environ.get("RAY_ADDRESS", "")
    # Ray Client passes options on to the cluster's own ray.init, which has them already
    options = {} if address.startswith("ray://") else {"include_dashboard": False, "logging_level": "WARNING"}
    try:
        if connected_here:
            try:
                ray.init(address=args.address, **options)
            except ConnectionError as exc:
                raise CommandError(f"cannot connect to Ray: {exc}") from None
        if args.actors is not None:
            try:
                kray.actor_cpus(args.actors)
            except ValueError as exc:
                raise CommandError(f"--actors {args.actors}: {exc}") from None
        yield kray
    except ray.exceptions.RayTaskError as exc:
        # Ray Data passes on an actor's error as text: name our error in one line
        raised = re.findall(r"^kuiperinfer\.errors\.\w+: (.*)$", str(exc), re.MULTILINE)
        if raised:
            raise CommandError(raised[-1]) from None
        raise
    finally:
        context.enable_progress_bars, context.execution_options.preserve_order = settings
        for name, logger in loggers.items():
            logger.setLevel(levels[name])
        if connected_here:
            ray.shutdown()


def located(paths: Sequence[str | os.PathLike]) -> dict[str, str]:
    """Where Ray reads each path (absolute, or the URI as it is), and the path as given."""
    return {str(p) if "://" in str(p) else os.path.abspath(p): str(p) for p in paths}


def image_paths(specs: Sequence[str]) -> list[str]:
    """The images that IMAGE, DIR and GLOB arguments stand for, as ``kuiper classify`` finds
    them (a folder's image files, sorted; a file whatever its suffix); URIs are left for
    Ray to list."""
    paths: list[str] = []
    for spec in specs:
        if "://" in spec:
            paths.append(spec)
        elif any(c in spec for c in GLOB_CHARACTERS):
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                raise CommandError(f"no files match {spec}")
            paths.extend(str(p) for p in find_images(matches))
        else:
            paths.extend(str(p) for p in find_images([spec]))
    return paths


def classify_on_ray(args: argparse.Namespace, classifier: Classifier,
                    images: Sequence[str | os.PathLike]) -> list[Classification] | None:
    """Classify ``images`` on Ray with ``classifier``'s labels and preprocessing. With
    ``--output``, writes the rows there and returns None; otherwise returns the results in
    the order of ``images``, having reported the images that could not be read on stderr."""
    if args.output:
        check_output(args.output)
    where = located(images)
    with ray_session(args, ordered=not args.output) as kray:
        has_uri = any("://" in path for path in where)
        actors = args.actors or kray.default_actors()
        dataset = kray.read_image_files(list(where), concurrency=actors,
                                        extensions=kray.IMAGE_EXTENSIONS if has_uri else None)
        model = str(model_path(args.model).resolve()) if args.model else None
        rows = kray.classify(dataset, actors=actors, batch_size=args.batch_size, model=model,
                             labels=classifier.labels, preprocess=classifier.preprocess,
                             top_k=args.top_k, outputs=args.outputs, **_load_options(args))
        batches = rows.iter_batches(batch_format="pyarrow", batch_size=None)
        if args.output:
            failed = 0
            with kray.ResultsFile(args.output) as out:
                for batch in batches:
                    out.write(batch)
                    failed += batch.num_rows - batch.column("error").null_count
            print(f"wrote {out.rows} rows to {args.output}")
            if failed:
                _warn(args, f"{failed} of {out.rows} images could not be read; the error column says why")
            return None
        results = []
        for batch in batches:
            for row in batch.to_pylist():
                shown = where.get(row["path"], row["path"])
                if row["error"] is not None:
                    _warn(args, f"{shown}: {row['error']}")
                    continue
                predictions = [Prediction(*p) for p in zip(row["indices"], row["labels"], row["probabilities"])]
                results.append(Classification(shown, predictions))
        return results


def run_on_ray(args: argparse.Namespace) -> int:
    """Run the model over the rows of the ``--input`` files and write ``--output``."""
    if not args.input:
        raise CommandError("--ray reads rows from --input data.parquet (or .npy)")
    if not args.output:
        raise CommandError("--ray writes the outputs to --output out.parquet or out.jsonl")
    if args.random:
        raise CommandError("--random is not for --ray, which reads every input from --input")
    check_output(args.output)
    model = model_path(args.model)
    input_names = kuiperinfer.load(model, warmup=False).input_names   # checks the model here, once
    for path in args.input:
        if "://" not in path and not os.path.exists(path):
            raise CommandError(f"--input {path}: no such file or directory")
    paths = list(located(args.input))
    numpy_files = [path.lower().endswith(".npy") for path in paths]
    if any(numpy_files) and not all(numpy_files):
        raise CommandError("--input: give .npy files or parquet, not both")
    if all(numpy_files) and len(input_names) != 1:
        raise CommandError(f".npy rows are for a model with one input; this one has {len(input_names)} "
                           f"({', '.join(input_names)}): give parquet with a column per input")
    with ray_session(args) as kray:
        actors = args.actors or kray.default_actors()
        readers = min(actors, len(paths))
        if all(numpy_files):
            dataset = kray.read_numpy_rows(paths, input_names[0], concurrency=readers)
        else:
            dataset = kray.read_parquet_rows(paths, concurrency=readers)
        model_file = str(model.resolve()) if args.model else None
        outputs = kray.predict(dataset, model_file, actors=actors, batch_size=args.batch or 8,
                               **_load_options(args))
        with kray.ResultsFile(args.output) as out:
            for batch in outputs.iter_batches(batch_format="pyarrow", batch_size=None):
                out.write(batch)
    print(f"wrote {out.rows} rows to {args.output}")
    return 0


def _import_ray() -> tuple[ModuleType, ModuleType]:
    """``ray`` and :mod:`kuiperinfer.ray`; CommandError saying how to install them."""
    try:
        import ray
        import ray.data

        import kuiperinfer.ray as kray
    except ImportError as exc:
        raise CommandError(f"--ray needs Ray Data ({exc}): {INSTALL}") from None
    return ray, kray


def _warn(args: argparse.Namespace, message: str) -> None:
    print(f"kuiper {args.command}: warning: {message}", file=sys.stderr)


def _load_options(args: argparse.Namespace) -> dict[str, object]:
    """The command's load options as the actors take them: the calibration table's path as
    they find it (they may start elsewhere)."""
    options = load_options(args)
    if options["calibration"] is not None:
        options["calibration"] = str(Path(options["calibration"]).resolve())
    return options
