"""Why rtc loses stack episodes at one tick of delay: how the policy answers the pinned prefix.

At every rtc request with a pinned prefix (stack, validation seeds, MNN, delay 1, eh 12, noise 0), the same
inputs are also run unpinned (naive) and pinned to the naive chunk's own first rows (a consistent prefix), and the
three chunks are compared. Usage (from the repository root):
  MUJOCO_GL=egl python experiments/chunking_d1_validation/probe_prefix.py 20 results/chunking_d1_validation/probe_prefix.json
"""
from __future__ import annotations

import json
import sys

import numpy as np

import omni_vla_sim.eval as ev
from omni_vla_sim.eval import EpisodeSpec, EvalSettings, run_episode

TASK, SEED_BASE = "stack_red_on_blue", 1_100_000
rows: list[dict[str, float]] = []


class Probe:
    """Forwards to the runtime; on pinned requests also runs the unpinned and consistently pinned chunks."""

    def __init__(self, rt) -> None:
        self._rt = rt
        for n in ("backend", "horizon", "action_dim", "max_prefix", "cameras", "embedding_dim"):
            setattr(self, n, getattr(rt, n))
        self.naive = np.zeros((rt.horizon, rt.action_dim), np.float32)
        self.consistent = np.zeros_like(self.naive)

    def encode_instruction(self, text: str) -> np.ndarray:
        return self._rt.encode_instruction(text)

    def infer(self, images, state, instr, prefix, plen, noise, out) -> None:
        self._rt.infer(images, state, instr, prefix, plen, noise, out)
        if plen == 0:
            return
        self._rt.infer(images, state, instr, prefix, 0, noise, self.naive)
        own = prefix.copy()
        own[0, :plen] = self.naive[:plen]
        self._rt.infer(images, state, instr, own, plen, noise, self.consistent)
        gap = float(np.abs(prefix[0, :plen] - self.naive[:plen]).max())
        rows.append({
            "prefix_gap": gap,  # committed row vs what the fresh chunk would do there
            "rtc_vs_naive_next4": float(np.abs(out - self.naive)[plen:plen + 4].max()),
            "rtc_vs_naive_rest": float(np.abs(out - self.naive)[plen:].max()),
            "consistent_vs_naive_next4": float(np.abs(self.consistent - self.naive)[plen:plen + 4].max()),
        })

    def close(self) -> None:
        pass


def main(episodes: int) -> dict:
    runtime = ev._runtime
    ev._runtime = lambda s: Probe(runtime(s))
    s = EvalSettings(backend="mnn", bundle_dir="bundles/reference", tasks=(TASK,), strategy="rtc", delay_ticks=1,
                     execution_horizon=12, episodes=episodes, seed_base=SEED_BASE)
    wins = sum(run_episode(EpisodeSpec(s, TASK, SEED_BASE + k)).success for k in range(episodes))
    a = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    ratio = a["rtc_vs_naive_next4"] / np.maximum(a["prefix_gap"], 1e-6)
    stat = lambda x: {"median": round(float(np.median(x)), 4), "p90": round(float(np.percentile(x, 90)), 4)}
    return {"task": TASK, "episodes": episodes, "successes": int(wins), "pinned_requests": len(rows),
            **{k: stat(v) for k, v in a.items()}, "next4_over_gap": stat(ratio)}


if __name__ == "__main__":  # writes the file itself: MNN prints to stdout
    result = main(int(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(result, f, indent=1)
