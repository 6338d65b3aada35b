"""The ``kuiper`` command: one sub-command per module in this package.

Every sub-command module (found automatically) defines ``add_arguments(parser)`` and ``main(args) -> int``.
Errors from kuiperinfer (and missing files) are printed as one clear line with exit
code 2; argparse reports bad options the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kuiperinfer.errors import KuiperError


def _command_names() -> list[str]:
    """Every sub-command: the modules of this package."""
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


class CommandError(Exception):
    """A user error in a sub-command (missing file, bad option value): exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="kuiper", description="kuiperinfer: run PNNX models (PyTorch exports) on NumPy.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _command_names():
        module = importlib.import_module(f"kuiperinfer.cli.{name}")
        doc = (module.__doc__ or "").strip()
        command = sub.add_parser(name, help=doc.splitlines()[0] if doc else None, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (KuiperError, CommandError, OSError) as exc:
        message = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.filename}: {exc.strerror}"
        print(f"kuiper {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
