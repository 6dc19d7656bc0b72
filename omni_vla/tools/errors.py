"""One line per bad input: the CLI's user-error type, argparse validators and the error formatter.

A user error (bad path, value, config key, task, bundle or server) becomes ONE stderr line
naming what was wrong and what was expected, exit code 2. Anything else is a bug in the project
and says so ("internal error", exit code 1) so it is not mistaken for a typo; `--debug` shows
the traceback of either.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from omni_vla.errors import explain, one_line

__all__ = ["explain", "one_line"]  # the formatter lives in the base layer (omni_vla/errors.py); re-exported for the verbs

USER_EXIT, INTERNAL_EXIT = 2, 1

# Non-ValueError exceptions that the project raises for bad inputs, by the module that defines them.
# Looked up in sys.modules when an error happens: a type whose module was never imported was not raised.
_PROJECT_USER_ERRORS = {
    "omni_vla.runtime.bundle": "BundleError",
    "omni_vla.runtime.text": "InstructionError",
    "omni_vla.cloud.client": "OpenPIError",
}
# Environment the user controls: a path that is not there or not writable, a server that does not answer.
_OS_USER_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError,
                   ConnectionError, TimeoutError)
_PROJECT_PACKAGES = ("omni_vla", "omni_vla_sim", "omni_vla_policies", "omni_vla_safety")


class UsageError(Exception):
    """A bad input, worded for the user: what was wrong and what was expected."""


def _raised_by_project(exc: BaseException) -> bool:
    """True when the innermost frame that raised `exc` is the project's own code (a deliberate refusal)."""
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    roots = [Path(m.__file__).resolve().parent for name in _PROJECT_PACKAGES
             if (m := sys.modules.get(name)) is not None and getattr(m, "__file__", None)]
    where = Path(tb.tb_frame.f_code.co_filename).resolve()
    return any(where.is_relative_to(root) for root in roots)


def is_user_error(exc: BaseException) -> bool:
    """A bad input (exit 2) rather than a bug (exit 1)."""
    if isinstance(exc, (UsageError, ValidationError, argparse.ArgumentError, *_OS_USER_ERRORS)):
        return True
    for module, name in _PROJECT_USER_ERRORS.items():
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    # The project refuses bad values with ValueError; one raised inside a library is a bug of ours.
    return isinstance(exc, ValueError) and _raised_by_project(exc)


def describe(exc: BaseException) -> str:
    """The one line shown for a user error (without the 'omni-vla <verb>: ' prefix)."""
    if isinstance(exc, ValidationError):
        return explain(exc)
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror.lower()}"
    return one_line(str(exc)) or type(exc).__name__


def report(prog: str, exc: BaseException, debug: bool) -> int:
    """Print `exc` as the user should see it; the exit code (2 user error, 1 internal error)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    user = is_user_error(exc)
    what = describe(exc) if user else f"internal error (a bug; rerun with --debug for the traceback): " \
                                        f"{type(exc).__name__}: {one_line(str(exc))}"
    print(f"{prog}: {what}", file=sys.stderr)
    return USER_EXIT if user else INTERNAL_EXIT


# ----------------------------------------------------------------------------- argparse validators
def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts of episodes, workers, repetitions)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (got {value})")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (counts where 0 means 'none')."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def non_negative_float(text: str) -> float:
    """argparse type: a finite float >= 0 (durations, latencies)."""
    if not 0 <= _float(text) < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (got {text})")
    return float(text)


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0 (durations, timeouts)."""
    if not 0 < _float(text) < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0 (got {text})")
    return float(text)


def existing_file(text: str) -> Path:
    """argparse type: a path to a file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" + (" (it is a directory)" if path.is_dir() else ""))
    return path


def existing_dir(text: str) -> Path:
    """argparse type: a path to a directory that exists."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory" + (" (it is a file)" if path.exists() else ""))
    return path


def existing_bundle(text: str) -> Path:
    """argparse type: an exported policy bundle (a directory with manifest.json)."""
    path = Path(text)
    expected = "expected a policy bundle directory written by `omni-vla export`"
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory ({expected})")
    if not (path / "manifest.json").is_file():
        raise argparse.ArgumentTypeError(f"{text}: no manifest.json there ({expected})")
    return path


def comma_list(item: Any) -> Any:
    """argparse type factory: a comma list whose items are each checked by `item`."""
    def parse(text: str) -> list:
        parts = [p for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected a comma list, got {text!r}")
        return [item(p.strip()) for p in parts]
    parse.__name__ = f"comma list of {getattr(item, '__name__', 'values')}"
    return parse


def choice_list(choices: tuple[str, ...]) -> Any:
    """argparse type: a comma list of names, each one of `choices`."""
    def check(name: str) -> str:
        if name not in choices:
            raise argparse.ArgumentTypeError(f"unknown {name!r}; expected a comma list of {', '.join(choices)}")
        return name
    return comma_list(check)
