"""Developer and operator tools on top of every layer: the `omni-vla` CLI, benchmarks, process bringup."""
