"""`omni-vla <verb>`: one entry point; each verb imports only what it needs (no torch on the robot path).

Every verb runs under one guard: a bad input (path, value, config key, task, bundle, server) is one
stderr line naming it, exit code 2; an unexpected exception is one line saying it is an internal
error, exit code 1; `--debug` prints the traceback as well.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Callable, Iterator

from omni_vla.tools.errors import USER_EXIT, UsageError, one_line, report

# verb -> (module, function). Sub-verbs of `bench` are looked up as "bench <what>".
VERBS: dict[str, tuple[str, str]] = {
    "demo": ("omni_vla_sim.demo", "main"),
    "collect": ("omni_vla_sim.collect", "main"),
    "dataset": ("omni_vla_sim.lerobot_dataset", "main"),
    "train": ("omni_vla_policies.train", "main"),
    "average": ("omni_vla_policies.average", "main"),
    "export": ("omni_vla_policies.export", "main"),
    "parity": ("omni_vla_policies.parity", "main"),
    "import": ("omni_vla_policies.lerobot_import", "main"),
    "eval": ("omni_vla_sim.eval", "main"),
    "serve-openpi": ("omni_vla_sim.openpi_server", "main"),
    "limits": ("omni_vla_safety.limits_table", "main"),
    "bench sim": ("omni_vla_sim.bench", "main"),
    "bench runtime": ("omni_vla_policies.bench_runtime", "main"),
    "bench loop": ("omni_vla.tools.bench_loop", "main"),
    "bench safety": ("omni_vla_safety.bench", "main"),
    "bench graph": ("omni_vla.tools.bench_graph", "main"),
}

# Third-party loggers that warn at import time about nothing the user did (torchao's CUDA-only kernels
# missing on a CPU machine, a torch deprecation inside executorch): hidden unless --debug.
IMPORT_NOISE = ("torchao", "torch.utils._pytree")

USAGE = "usage: omni-vla [--debug] {" + ",".join(sorted({v.split()[0] for v in VERBS})) + "} [args]\n" \
        "       omni-vla [--debug] bench {sim,runtime,loop,safety,graph} [--json]\n" \
        "  a bad input is one line on stderr and exit code 2; --debug (before or after the verb) shows the traceback"


def _raise_instead(self: argparse.ArgumentParser, message: str) -> None:
    raise UsageError(f"{message} (see {self.prog} --help)")


@contextlib.contextmanager
def _one_line_argparse() -> Iterator[None]:
    """argparse prints the usage block and exits; under the guard every verb's parser raises instead."""
    original = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = _raise_instead  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original  # type: ignore[method-assign]


def run_guarded(prog: str, func: Callable[[list[str]], int | None], argv: list[str], debug: bool) -> int:
    """`func(argv)` with every failure turned into one stderr line and an exit code (see errors.report)."""
    try:
        with _one_line_argparse():
            return int(func(argv) or 0)
    except SystemExit as exc:  # argparse's --help (0), a verb's own `raise SystemExit("message")`
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        message = one_line(str(exc.code)).removeprefix(f"{prog}: ")
        print(f"{prog}: {message}", file=sys.stderr)
        return USER_EXIT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the guard: one line (user error 2, bug 1), traceback with --debug
        return report(prog, exc, debug)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    if verb == "bench":
        if not rest or f"bench {rest[0]}" not in VERBS:
            print("omni-vla bench: choose one of sim, runtime, loop, safety, graph (see omni-vla --help)",
                  file=sys.stderr)
            return 2
        verb, rest = f"bench {rest[0]}", rest[1:]
    if verb not in VERBS:
        print(f"omni-vla: unknown verb {verb!r}; expected one of {', '.join(sorted({v.split()[0] for v in VERBS}))}",
              file=sys.stderr)
        return 2
    module_name, func = VERBS[verb]
    if not debug:
        for name in IMPORT_NOISE:
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"omni-vla {verb}: not available in this checkout ({module_name} is missing)", file=sys.stderr)
            return 3
        if debug:
            raise
        print(f"omni-vla {verb}: needs {(exc.name or '?').split('.')[0]}, which this Python ({sys.executable}) lacks; "
              "the robot's environment holds only the robot path: use the development one (make setup, "
              "docs/install.md)", file=sys.stderr)
        return 3
    return run_guarded(f"omni-vla {verb}", getattr(module, func), rest, debug)


if __name__ == "__main__":
    sys.exit(main())
