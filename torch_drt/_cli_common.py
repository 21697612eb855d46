"""What the ``torch-drt`` subcommands share: the one-line error, the parser that reports that way, argument types."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn


class CliError(Exception):
    """A failure the command reports as one line; ``status`` is the exit status (1: failed, 2: bad arguments)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are a ``CliError`` (one line, status 2), not usage text."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "torch-drt cache build" -> "cache build"
        raise CliError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)", 2)


def report(message: str, error: BaseException | None = None) -> None:
    """Print ``torch-drt: error: <message>`` as one line on stderr (naming ``error``'s type when it is not an
    ``OSError``: a file-system message names its file already)."""
    if error is not None and not isinstance(error, OSError):
        message = f"{type(error).__name__}: {message}" if message else type(error).__name__
    print(f"torch-drt: error: {' '.join(message.split())}", file=sys.stderr)


def existing_dir(path: str | Path) -> Path:
    """``path`` as a ``Path``, or a ``CliError`` saying it is missing or not a directory."""
    path = Path(path)
    if not path.is_dir():
        raise CliError(f"{path}: {'not a directory' if path.exists() else 'no such directory'}")
    return path


def json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    """The JSON object given as ``flag`` (None when not given); anything else is a ``CliError`` naming ``flag``."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise CliError(f"{flag} is not valid JSON ({e})", 2) from None
    if not isinstance(value, dict):
        raise CliError(f"{flag} must be a JSON object", 2)
    return value


def _int(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} must be >= {least}")
    return value


def positive_int(text: str) -> int:
    """An argument type: an int >= 1."""
    return _int(text, 1)


def non_negative_int(text: str) -> int:
    """An argument type: an int >= 0."""
    return _int(text, 0)
