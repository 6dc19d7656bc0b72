"""Load a dataset with LeRobot's own LeRobotDataset, offline, in LeRobot's own venv; print a JSON summary.

    python lerobot_dataset_check.py ROOT [--raw RAW.npz] [--dump OUT.npz]

Reads every frame through LeRobotDataset.__getitem__ (parquet rows and video frames decoded by LeRobot's own
decoder, torchcodec), and recomputes the statistics with LeRobot's own code to compare with meta/stats.json and
the per-episode stats of meta/episodes: `compute_quantile_stats_for_dataset` (LeRobot's stats of a loaded
dataset: every frame, decoded video) and the recorder's path (`compute_episode_stats` per episode, then
`aggregate_stats` episode by episode as `save_episode` does) with the image stats taken on the raw frames of
RAW.npz (keys e<episode>/<camera>, uint8 [T, H, W, 3]), where LeRobot's recorder takes them. LeRobot 0.4.4
squares uint8 pixels before promoting them (std 0: huggingface/lerobot#3682, fixed by #3697): the reference
image stats here promote to float32 first, as the fix does; the unfixed values are reported beside them.
--dump writes the decoded frames (uint8) and the parquet columns of every frame for the caller to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402

REPO_ID = "local/omni_vla"
# LeRobot 0.4.4 decodes video with torchcodec, or with torchvision.io.VideoReader ("pyav"), which torchvision 0.29
# (the one LeRobot's venv has) no longer has; torchcodec loads the system's FFmpeg libraries.
DECODER_HELP = ("LeRobot's venv cannot decode video: it needs torchcodec (torchcodec==0.14.0 worked with its torch "
                "2.14.1) and FFmpeg's shared libraries (Debian 12: libavcodec59 libavformat59 libavutil57 libswscale6 "
                "libavdevice59 libavfilter8 libswresample4)")


def _np(value) -> np.ndarray:  # noqa: ANN001 - torch tensor, numpy array or number
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _max_diff(ours: dict, ref: dict) -> dict[str, float]:
    """Max abs difference per feature over the stats both have; a stat missing from `ours` is +inf."""
    out = {}
    for key, stats in ref.items():
        diffs = [float(np.max(np.abs(_np(ours[key][k]).astype(np.float64) - _np(v).astype(np.float64))))
                 if key in ours and k in ours[key] else float("inf") for k, v in stats.items()]
        out[key] = max(diffs)
    return out


def _episode_stats_from_parquet(root: Path) -> list[dict]:
    """meta/episodes' stats/<feature>/<stat> columns, per episode (LeRobot's loader drops them)."""
    from lerobot.datasets.utils import unflatten_dict

    rows = []
    for path in sorted((root / "meta" / "episodes").glob("*/*.parquet")):
        rows += pq.read_table(path).to_pylist()
    rows.sort(key=lambda r: r["episode_index"])
    return [unflatten_dict({k.removeprefix("stats/"): np.asarray(v) for k, v in r.items() if k.startswith("stats/")})
            for r in rows]


def _recorder_stats(ds, columns: dict[str, np.ndarray], raw) -> tuple[list, list]:  # noqa: ANN001 - LeRobot's, npz
    """Per-episode stats as LeRobot's recorder computes them: (with the #3697 fix, as 0.4.4 ships them)."""
    from lerobot.datasets.compute_stats import compute_episode_stats, get_feature_stats, sample_indices

    fixed, shipped = [], []
    non_video = {k: ft for k, ft in ds.features.items() if ft["dtype"] not in ("video", "image")}
    for ep in range(ds.meta.total_episodes):
        row = ds.meta.episodes[ep]
        sl = slice(row["dataset_from_index"], row["dataset_to_index"])
        buffer = {k: columns[k][sl] for k in non_video}
        buffer["timestamp"] = columns["frame_index"][sl] / ds.fps  # the recorder's float64 frame_index / fps
        stats = compute_episode_stats(buffer, non_video)
        unfixed = {}
        for key in ds.meta.video_keys if raw is not None else ():
            frames = raw[f"e{ep}/{key.rsplit('.', 1)[-1]}"]
            sampled = frames[sample_indices(len(frames))].transpose(0, 3, 1, 2)  # what sample_images returns
            for target, pixels in ((stats, sampled.astype(np.float32)), (unfixed, sampled)):
                s = get_feature_stats(pixels, axis=(0, 2, 3), keepdims=True)
                target[key] = {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in s.items()}
        fixed.append(stats)
        shipped.append({**stats, **unfixed})
    return fixed, shipped


def _aggregate_as_recorded(per_episode: list[dict]) -> dict:
    """LeRobotDatasetMetadata.save_episode: stats = aggregate_stats([stats, episode_stats]), episode by episode."""
    from lerobot.datasets.compute_stats import aggregate_stats

    total = per_episode[0]
    for stats in per_episode[1:]:
        total = aggregate_stats([total, stats])
    return total


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root", type=Path)
    p.add_argument("--raw", type=Path, help="npz of the raw camera frames per episode (e<i>/<camera>)")
    p.add_argument("--dump", type=Path, help="npz to write decoded frames and columns to")
    args = p.parse_args(argv)

    import lerobot
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.v30.augment_dataset_quantile_stats import compute_quantile_stats_for_dataset
    from lerobot.datasets.video_utils import get_video_info

    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401 - loads FFmpeg
    except (ImportError, RuntimeError, OSError) as exc:
        print(f"{DECODER_HELP} ({type(exc).__name__}: {str(exc).splitlines()[0]})", file=sys.stderr)
        return 3
    ds = LeRobotDataset(REPO_ID, root=args.root)
    keys = [k for k in ds.features if k not in ds.meta.video_keys]
    items = [ds[i] for i in range(len(ds))]  # every frame, videos decoded by LeRobot's decoder
    columns = {k: np.stack([_np(it[k]) for it in items]) for k in keys}
    frames = {k: np.stack([(_np(it[k]) * 255).round().astype(np.uint8) for it in items]) for k in ds.meta.video_keys}
    per_frame_task = [it["task"] for it in items]

    raw = np.load(args.raw) if args.raw else None
    fixed, shipped = _recorder_stats(ds, columns, raw)
    loaded_eps = _episode_stats_from_parquet(args.root)
    from_loaded = compute_quantile_stats_for_dataset(ds)
    video_files = sorted((args.root / "videos").glob("*/*/*.mp4"))
    summary = {
        "lerobot_version": lerobot.__version__ if hasattr(lerobot, "__version__") else None,
        "video_backend": ds.video_backend,
        "num_episodes": ds.num_episodes, "num_frames": ds.num_frames, "fps": ds.fps,
        "codebase_version": ds.meta.info["codebase_version"],
        "features": {k: {"dtype": ft["dtype"], "shape": list(ft["shape"]), "names": ft["names"]}
                     for k, ft in ds.features.items()},
        "tasks": list(ds.meta.tasks.index),
        "episodes": [{"episode_index": int(e["episode_index"]), "from": int(e["dataset_from_index"]),
                      "to": int(e["dataset_to_index"]), "length": int(e["length"]), "tasks": list(e["tasks"])}
                     for e in ds.meta.episodes],
        "frame_tasks": per_frame_task,
        "video_info": {str(f.relative_to(args.root)): get_video_info(f) for f in video_files},
        "info_video": {k: ds.features[k].get("info") for k in ds.meta.video_keys},
        "sample": {k: _np(items[0][k]).tolist() for k in ("observation.state", "action",
                                                          "observation.environment_state")},
        "stats_keys": sorted(ds.meta.stats),
        "stats_action": {k: _np(v).tolist() for k, v in ds.meta.stats["action"].items()},
        # stats.json (as LeRobot loaded it) against LeRobot's own computations
        "stats_diff_recorder": _max_diff(ds.meta.stats, _aggregate_as_recorded(fixed)),
        "episode_stats_diff_recorder": [_max_diff(ours, ref) for ours, ref in zip(loaded_eps, fixed)],
        "stats_diff_loaded": _max_diff(ds.meta.stats, from_loaded),
        "image_std_shipped_0_4_4": {k: _np(_aggregate_as_recorded(shipped)[k]["std"]).ravel().tolist()
                                    for k in ds.meta.video_keys if raw is not None},
        "image_std_ours": {k: _np(ds.meta.stats[k]["std"]).ravel().tolist() for k in ds.meta.video_keys},
        "image_mean_loaded": {k: _np(from_loaded[k]["mean"]).ravel().tolist() for k in ds.meta.video_keys},
        "image_mean_ours": {k: _np(ds.meta.stats[k]["mean"]).ravel().tolist() for k in ds.meta.video_keys},
    }
    if args.dump:
        np.savez(args.dump, **columns, **{f"video/{k}": v for k, v in frames.items()})
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
