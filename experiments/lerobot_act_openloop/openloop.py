"""Open-loop error of a bundle on recorded demonstrations: chunk rows 0-9 against the recorded next 10 actions.

    python experiments/lerobot_act_openloop/openloop.py BUNDLE [--instructions TABLE.json]

Every 40th episode of data/demos, every 7th step; mean absolute error per joint (rad), and the same for holding
still (the current joint positions). A chunk bundle (an imported ACT) is conditioned through the instruction table;
the reference flow bundle runs deterministically (zero noise, no pinned prefix).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import h5py
import numpy as np

from omni_vla.inference.client import open_chunk_runtime, open_runtime
from omni_vla.runtime.chunk_loop import is_chunk_bundle


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("bundle")
    p.add_argument("--instructions", default="data/lerobot_demos/meta/omni_vla_instructions.json")
    p.add_argument("--demos", default="data/demos")
    a = p.parse_args()
    chunk = is_chunk_bundle(a.bundle)
    rt = open_chunk_runtime("mnn", a.bundle, 1) if chunk else open_runtime("mnn", a.bundle, 1)
    table = json.loads(Path(a.instructions).read_text())["table"] if chunk else {}
    errs, still = [], []
    for f in sorted(Path(a.demos).rglob("*.hdf5"))[::40]:
        with h5py.File(f) as h:
            d = h["data/demo_0"]
            text = str(d.attrs["instruction"])
            front, wrist, q, act = (d[k][()] for k in ("obs/front_rgb", "obs/wrist_rgb", "obs/qpos", "actions"))
        for t in range(0, len(act) - 10, 7):
            images = {name: np.ascontiguousarray(img[t].transpose(2, 0, 1)[None], np.float32) / np.float32(255)
                      for name, img in (("front", front), ("wrist", wrist))}
            state = q[t][None].astype(np.float32)
            if chunk:
                out = np.zeros((rt.chunk_length, rt.action_dim), np.float32)
                rt.infer(images, state, out, np.asarray(table[text], np.float32)[None])
            else:
                h_, d_ = rt.horizon, rt.action_dim
                out = np.zeros((h_, d_), np.float32)
                zeros = np.zeros((1, h_, d_), np.float32)
                rt.infer(images, state, rt.encode_instruction(text)[None], zeros, 0, zeros, out)
            errs.append(np.abs(out[:10] - act[t:t + 10]).mean(0))
            still.append(np.abs(q[t][None] - act[t:t + 10]).mean(0))
    print(json.dumps({"bundle": a.bundle, "frames": len(errs), "policy_l1_rad": [round(float(x), 4) for x in np.mean(errs, 0)],
                      "hold_still_l1_rad": [round(float(x), 4) for x in np.mean(still, 0)]}))


if __name__ == "__main__":
    main()
