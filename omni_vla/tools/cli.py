"""`omni-vla <verb>`: one entry point; each verb imports only what it needs (no torch on the robot path)."""
from __future__ import annotations

import importlib
import sys

# verb -> (module, function). Sub-verbs of `bench` are looked up as "bench <what>".
VERBS: dict[str, tuple[str, str]] = {
    "demo": ("omni_vla_sim.demo", "main"),
    "collect": ("omni_vla_sim.collect", "main"),
    "train": ("omni_vla_policies.train", "main"),
    "average": ("omni_vla_policies.average", "main"),
    "export": ("omni_vla_policies.export", "main"),
    "parity": ("omni_vla_policies.parity", "main"),
    "eval": ("omni_vla_sim.eval", "main"),
    "serve-openpi": ("omni_vla_sim.openpi_server", "main"),
    "limits": ("omni_vla_safety.limits_table", "main"),
    "bench sim": ("omni_vla_sim.bench", "main"),
    "bench runtime": ("omni_vla_policies.bench_runtime", "main"),
    "bench loop": ("omni_vla.tools.bench_loop", "main"),
    "bench safety": ("omni_vla_safety.bench", "main"),
    "bench graph": ("omni_vla.tools.bench_graph", "main"),
}

USAGE = "usage: omni-vla {" + ",".join(sorted({v.split()[0] for v in VERBS})) + "} [args]\n" \
        "       omni-vla bench {sim,runtime,loop,safety,graph} [--json]"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    if verb == "bench":
        if not rest or f"bench {rest[0]}" not in VERBS:
            print(f"omni-vla bench: choose one of sim, runtime, loop, safety, graph\n{USAGE}", file=sys.stderr)
            return 2
        verb, rest = f"bench {rest[0]}", rest[1:]
    if verb not in VERBS:
        print(f"omni-vla: unknown verb {verb!r}\n{USAGE}", file=sys.stderr)
        return 2
    module_name, func = VERBS[verb]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"omni-vla {verb}: not available in this checkout ({module_name} is missing)", file=sys.stderr)
            return 3
        raise
    return int(getattr(module, func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
