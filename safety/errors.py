"""A pydantic ValidationError as the one line every refusal carries.

It lives here, not in omni_vla/, because the supervisor refuses bad parameters too and imports nothing
of the project; the ROS nodes of omni_vla import it from here.
"""
from __future__ import annotations

import difflib
from typing import Iterable

from pydantic import ValidationError

_OPS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def one_line(text: str) -> str:
    """Any message squeezed onto one line (lines joined with '; '): a log line or stderr refusal is grep-able."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def explain(exc: ValidationError, known: Iterable[str] = (), only: Iterable[str] | None = None) -> str:
    """'rate_hz: must be > 0 (got -1.0); joint_names: ...'.

    `known`: the model's field names, so an unknown key is answered with the closest ones. `only`: the
    dotted names to report (a model-level error, with no name, is then left out).
    """
    keep = set(only) if only is not None else None
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        if keep is not None and loc not in keep:
            continue
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(err["loc"][-1]), list(known), n=2, cutoff=0.75)
            hint = f"did you mean {' or '.join(close)}?" if close else f"no such setting in {exc.title}"
            parts.append(f"{loc}: unknown key ({hint})")
            continue
        op = _OPS.get(err["type"])
        msg = f"must be {op} {next(iter(err['ctx'].values()))}" if op else err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg} (got {err['input']!r})" if loc else msg)
    return one_line("; ".join(parts))
