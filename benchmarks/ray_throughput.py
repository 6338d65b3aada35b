"""Images a second of ``kuiper classify``: one process, and on Ray with 1 and 2 actors.

    python -m benchmarks.ray_throughput [--images 256] [--batch-size 8] [--actors 1,2]
                                        [--photos DIR ...] [--address ADDRESS] [--repeats 1]

The photos (the bundled ones, or the image files of the ``--photos`` folders) are copied
over and over into a temporary folder until there are ``--images`` of them. Each
configuration runs as the command a user types, in a process of its own, timed from start
to end: ``kuiper classify DIR --batch-size B`` in one process, and ``kuiper classify DIR
--ray --actors N --batch-size B --output results.parquet``, which starts a local Ray
cluster (or joins ``--address``) and stops it. The table gives the images a second from start
to end, and what start-up costs: the time of the same command on one batch of images (Python,
the model, and for Ray the cluster and its actors). With ``--repeats R`` the commands run in R
rounds and each time is the best of R.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kuiperinfer.models import sample_images
from kuiperinfer.vision import find_images


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256, help="images to classify (default: 256)")
    parser.add_argument("--batch-size", type=int, default=8, help="images a forward pass (default: 8)")
    parser.add_argument("--actors", default="1,2", help="actor counts on Ray, comma-separated (default: 1,2)")
    parser.add_argument("--photos", nargs="+", metavar="DIR",
                        help="folders of photos to repeat (default: the bundled sample photos)")
    parser.add_argument("--address", help="the Ray cluster to use (default: a local one per command)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds through the commands; each time is the best of them (default: 1)")
    args = parser.parse_args(argv)
    photos = find_images(args.photos) if args.photos else sample_images()
    actors = [int(n) for n in args.actors.split(",")]
    configurations = [("one process", [])] + [
        (f"Ray, {n} actor{'s' if n > 1 else ''}", ["--ray", "--actors", str(n)]) for n in actors]
    with tempfile.TemporaryDirectory(prefix="kuiper-ray-bench-") as scratch:
        folders = {count: _folder_of(photos, count, Path(scratch) / f"images-{count}")
                   for count in (args.images, args.batch_size)}
        commands = [["classify", "DIR", "--batch-size", str(args.batch_size), *options]
                    + (["--output", f"{scratch}/results.parquet"] if options else [])
                    + (["--address", args.address] if options and args.address else [])
                    for _, options in configurations]
        # round after round through every command, so that a noisy spell of a shared
        # machine falls on all of them rather than on one
        full: list[float] = [float("inf")] * len(commands)
        start_up: list[float] = [float("inf")] * len(commands)
        for _ in range(args.repeats):
            for index, command in enumerate(commands):
                full[index] = min(full[index], _time(command, folders[args.images]))
                start_up[index] = min(start_up[index], _time(command, folders[args.batch_size]))
    rows = []
    for (label, _), command, whole, fixed in zip(configurations, commands, full, start_up):
        shown = " ".join(command).replace(scratch, "TMP")
        rows.append((label, f"`kuiper {shown}`", f"{whole:.1f}", f"{args.images / whole:.1f}", f"{fixed:.1f}"))
    print(f"{args.images} images ({len(photos)} photos repeated), batch size {args.batch_size}; "
          f"{_cpu_model()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
          f"Ray {_ray_version()}\n")
    headers = ("configuration", "command", "time (s)", "images/s", f"start-up: time on {args.batch_size} images (s)")
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(headers))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


def _folder_of(photos: list[Path], count: int, folder: Path) -> Path:
    """``folder`` with ``count`` images: copies of ``photos`` in turn."""
    folder.mkdir()
    for index, photo in zip(range(count), itertools.cycle(photos)):
        shutil.copyfile(photo, folder / f"{index:05d}{photo.suffix.lower()}")
    return folder


def _time(command: list[str], folder: Path) -> float:
    """Seconds that ``kuiper *command`` takes with DIR replaced by ``folder``."""
    argv = [str(folder) if arg == "DIR" else arg for arg in command]
    start = time.perf_counter()
    subprocess.run([*_kuiper(), *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _kuiper() -> list[str]:
    """The installed ``kuiper`` script beside this Python, or ``python -m kuiperinfer.cli``."""
    script = shutil.which("kuiper", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "kuiperinfer.cli"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _ray_version() -> str:
    try:
        import ray
    except ImportError:
        return "not installed"
    return ray.__version__


if __name__ == "__main__":
    sys.exit(main())
