"""The ``kuiper`` command: one sub-command per module in this package.

Every sub-command module (found automatically) defines ``add_arguments(parser)`` and ``main(args) -> int``.
Errors from kuiperinfer (and missing files) are printed as one clear line with exit
code 2; argparse reports bad options the same way.

Only the sub-command given is imported: the list of commands comes from the modules'
docstrings, read as text, so that ``kuiper --help`` and a mistyped command answer at once.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path

from kuiperinfer.errors import KuiperError


def _command_names() -> list[str]:
    """Every sub-command: the modules of this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _docstring(name: str) -> str:
    """The docstring of sub-command ``name``'s module, read without importing it."""
    source = Path(__path__[0], f"{name}.py").read_text(encoding="utf-8")
    return (ast.get_docstring(ast.parse(source)) or "").strip()


class CommandError(Exception):
    """A user error in a sub-command (missing file, bad option value): exit code 2."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every sub-command; only ``command`` (None: all of them) gets its options."""
    parser = argparse.ArgumentParser(
        prog="kuiper", description="kuiperinfer: run PNNX models (PyTorch exports) on NumPy.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _command_names():
        doc = _docstring(name)
        command_parser = sub.add_parser(name, help=doc.splitlines()[0] if doc else None, description=doc,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        if command in (None, name):
            module = importlib.import_module(f"kuiperinfer.cli.{name}")
            module.add_arguments(command_parser)
            command_parser.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = _command_names()
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in names else "")
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
