"""`omni-vla dataset lerobot DATA_DIR --out DIR`: our demonstrations as a LeRobotDataset (codebase v3.0).

LeRobot's training reads parquet + mp4 + meta (info.json, stats.json, tasks.parquet, episodes parquet), so
a policy trained with LeRobot on our demonstrations needs them in that layout. The project never imports
LeRobot (it pins an older torch than ExecuTorch needs): this module writes the format with pyarrow and
ffmpeg, as read in LeRobot 0.4.4's datasets/lerobot_dataset.py, utils.py, compute_stats.py and
video_utils.py; tests/support/lerobot_dataset_check.py loads the result with LeRobot's own LeRobotDataset.

The four tasks share one scene and only the instruction tells them apart, and ACT has no language input:
the task is `observation.environment_state`, one-hot over TASKS in registry order, and the instruction
text is LeRobot's per-frame `task`. Written into a temporary directory beside the output and renamed at
the end: a failure leaves nothing, and an existing output is refused.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Literal

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from omni_vla_sim.dataset import DatasetError, Episode, episode_files, read_episode
from omni_vla_sim.env import EnvConfig
from omni_vla_sim.tasks import TASKS

CODEBASE_VERSION = "v3.0"
CAMERAS = {"front": "observation.images.front", "wrist": "observation.images.wrist"}
STATE, ENV_STATE, ACTION = "observation.state", "observation.environment_state", "action"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
# LeRobot's defaults (utils.py): files per chunk folder, and the sizes its recorder starts a new file at.
CHUNKS_SIZE, DATA_FILES_MB, VIDEO_FILES_MB = 1000, 100, 200
INDEX_FEATURES = {  # utils.DEFAULT_FEATURES: the index columns every frame carries
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
# compute_stats.py: quantiles kept beside mean/std/min/max, histogram bins that estimate them.
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_BINS = 5000
# H.264 through the ffmpeg that imageio-ffmpeg ships; LeRobot's torchcodec decoder reads it (the test decodes it).
VCODEC, VCODEC_NAME = "libx264", "h264"  # the encoder, and the stream's codec as info.json names it


class LeRobotExportConfig(BaseModel):
    """How the videos are encoded and split into files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 4:4:4 keeps the colour that tells the cubes apart: on 554 frames of our 64x64 demonstrations at crf 18,
    # yuv420p gave 32.7 dB and yuv444p 39.3 dB (tests/sim/test_lerobot_dataset.py states what LeRobot decodes).
    # yuv420p is for players that cannot show 4:4:4 H.264 (web browsers).
    pix_fmt: Literal["yuv444p", "yuv420p"] = "yuv444p"
    crf: int = Field(18, ge=0, le=51)
    gop: int = Field(2, ge=1)  # LeRobot's g=2: a keyframe every other frame keeps random access cheap
    # A 64x64 frame encoded to 0.35-0.54 KB, its parquet row to 0.08 KB (800 demonstrations, 58k frames):
    # 100k frames stay well under LeRobot's 200 MB video / 100 MB data file sizes.
    max_frames_per_file: int = Field(100_000, ge=1)


INSTRUCTIONS_FILE = "meta/omni_vla_instructions.json"  # not LeRobot's: the importer's instruction table


def task_names() -> list[str]:
    """The names behind `observation.environment_state`, one-hot, in TASKS order."""
    return list(TASKS)


def control_fps() -> int:
    """The demonstrations' rate: the env's control rate (LeRobot stores an integer fps)."""
    hz = EnvConfig().control_hz
    if hz != int(hz):
        raise DatasetError(f"control rate {hz} Hz is not an integer; LeRobot datasets need an integer fps")
    return int(hz)


def joint_names(path: Path) -> list[str]:
    """The joint names an episode file carries (/data's joint_names attribute, a JSON list)."""
    try:
        with h5py.File(path, "r") as f:
            return list(json.loads(f["data"].attrs["joint_names"]))
    except (OSError, KeyError, ValueError) as exc:
        raise DatasetError(f"{path}: no joint names (/data attribute joint_names, a JSON list): {exc}") from exc


def features(joints: list[str], size: int, cfg: LeRobotExportConfig, fps: int) -> dict:
    """info.json's features: cameras as video, state/env state/action with names, then the index columns."""
    video_info = {"video.height": size, "video.width": size, "video.codec": VCODEC_NAME,
                  "video.pix_fmt": cfg.pix_fmt, "video.is_depth_map": False, "video.fps": fps, "video.channels": 3,
                  "has_audio": False}
    feats: dict = {key: {"dtype": "video", "shape": [size, size, 3], "names": ["height", "width", "channels"],
                         "info": dict(video_info)} for key in CAMERAS.values()}
    feats[STATE] = {"dtype": "float32", "shape": [len(joints)], "names": list(joints)}
    feats[ENV_STATE] = {"dtype": "float32", "shape": [len(TASKS)], "names": task_names()}
    feats[ACTION] = {"dtype": "float32", "shape": [len(joints)], "names": list(joints)}
    return {**feats, **INDEX_FEATURES}


# ----------------------------------------------------------------------------- statistics (compute_stats.py)
def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    """RunningQuantileStats._compute_single_quantile: linear interpolation inside the histogram bin."""
    cumsum = np.cumsum(hist)
    idx = np.searchsorted(cumsum, target)
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    in_bin = cumsum[idx] - before
    if in_bin == 0:
        return edges[idx]
    return edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx])


def _rows_stats(rows: np.ndarray, count: int) -> dict[str, np.ndarray]:
    """min/max/mean/std/count/quantiles of [N, D] rows per column, as LeRobot's get_feature_stats does them
    (one RunningQuantileStats update: E[x^2] - E[x]^2 and 5000-bin histogram quantiles; fewer than 2 rows:
    plain numpy with the quantiles set to the mean)."""
    keys = [f"q{int(q * 100):02d}" for q in QUANTILES]
    if rows.shape[0] < 2:
        mean = np.mean(rows, axis=0)
        stats = {"min": np.min(rows, axis=0), "max": np.max(rows, axis=0), "mean": mean,
                 "std": np.std(rows, axis=0), "count": np.array([count])}
        return {**stats, **{k: mean.copy() for k in keys}}
    mean, mean_sq = np.mean(rows, axis=0), np.mean(rows**2, axis=0)
    lo, hi = np.min(rows, axis=0), np.max(rows, axis=0)
    edges = [np.linspace(lo[i] - 1e-10, hi[i] + 1e-10, QUANTILE_BINS + 1) for i in range(rows.shape[1])]
    hists = [np.zeros(QUANTILE_BINS) + np.histogram(rows[:, i], bins=edges[i])[0] for i in range(rows.shape[1])]
    stats = {"min": lo.copy(), "max": hi.copy(), "mean": mean.copy(),
             "std": np.sqrt(np.maximum(0, mean_sq - mean**2)), "count": np.array([count])}
    for key, q in zip(keys, QUANTILES):
        stats[key] = np.array([_quantile(h, e, q * rows.shape[0]) for h, e in zip(hists, edges)])
    return stats


def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Per-dimension stats of [T, D] (shape (D,)) or [T] (shape (1,)) per-frame values."""
    rows = values.reshape(-1, 1) if values.ndim == 1 else values
    return _rows_stats(rows, values.shape[0])


def sample_indices(n: int) -> list[int]:
    """compute_stats.sample_indices: LeRobot computes image stats on ~n^0.75 (at least 100) evenly spaced frames."""
    lo = min(100, n)
    num = max(lo, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, num)).astype(int).tolist()


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 [T, H, W, C] frames in [0, 1], shape (C, 1, 1), on LeRobot's sampled frames.

    LeRobot 0.4.4 squares the uint8 pixels before promoting them (the square wraps at 256, the variance goes
    negative and std is clamped to 0: huggingface/lerobot#3682); its fix (#3697) promotes to float32 first,
    as here. Downsampling (auto_downsample_height_width) only starts at 300 px, above our cameras.
    """
    sampled = frames[sample_indices(len(frames))].astype(np.float32)
    rows = sampled.reshape(-1, sampled.shape[-1])
    stats = _rows_stats(rows, len(sampled))
    return {k: v if k == "count" else (v / 255.0).reshape(-1, 1, 1) for k, v in stats.items()}


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """compute_stats.aggregate_stats: min of mins, max of maxes, count-weighted mean, pooled variance and
    count-weighted quantiles; all episodes at once, which equals LeRobot's episode-by-episode aggregation but for
    rounding (the test compares the two)."""
    out = {}
    for key in per_episode[0]:
        eps = [s[key] for s in per_episode]
        means = np.stack([s["mean"] for s in eps])
        variances = np.stack([s["std"] ** 2 for s in eps])
        counts = np.stack([s["count"] for s in eps])
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = np.expand_dims(counts, axis=-1)
        mean = (means * counts).sum(axis=0) / total
        variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
        agg = {"min": np.min(np.stack([s["min"] for s in eps]), axis=0),
               "max": np.max(np.stack([s["max"] for s in eps]), axis=0),
               "mean": mean, "std": np.sqrt(variance), "count": total}
        for q in (k for k in eps[0] if k.startswith("q") and k[1:].isdigit()):
            agg[q] = (np.stack([s[q] for s in eps]) * counts).sum(axis=0) / total
        out[key] = agg
    return out


def _jsonable(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {key: {k: np.asarray(v).tolist() for k, v in s.items()} for key, s in stats.items()}


# ----------------------------------------------------------------------------- writing
def _file_location(file_number: int) -> dict[str, int]:
    """utils.update_chunk_file_indices: files are numbered within chunk folders of CHUNKS_SIZE files."""
    return {"chunk_index": file_number // CHUNKS_SIZE, "file_index": file_number % CHUNKS_SIZE}


class _VideoFiles:
    """One open ffmpeg writer per camera, for the current data file number."""

    def __init__(self, root: Path, cfg: LeRobotExportConfig, fps: int) -> None:
        self.root, self.cfg, self.fps = root, cfg, fps
        self.writers: dict[str, object] = {}

    def open(self, file_number: int) -> None:
        import imageio.v2 as imageio  # optional: extra "sim" (imageio-ffmpeg), only when a dataset is converted

        self.close()
        for key in CAMERAS.values():
            path = self.root / VIDEO_PATH.format(video_key=key, **_file_location(file_number))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writers[key] = imageio.get_writer(
                path, format="FFMPEG", fps=self.fps, codec=VCODEC, pixelformat=self.cfg.pix_fmt,
                quality=None, macro_block_size=1, ffmpeg_log_level="error",
                ffmpeg_params=["-crf", str(self.cfg.crf), "-g", str(self.cfg.gop)])

    def append(self, key: str, frames: np.ndarray) -> None:
        for frame in frames:
            self.writers[key].append_data(frame)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers = {}


def _data_table(ep: Episode, episode_index: int, start: int, task_index: int, fps: int) -> pa.Table:
    """One episode's rows of data/*.parquet, typed as LeRobot's hf features (fixed-size float32 lists)."""
    n, d = ep.actions.shape
    one_hot = np.zeros((n, len(TASKS)), np.float32)
    one_hot[:, task_names().index(ep.task)] = 1.0
    frame_index = np.arange(n, dtype=np.int64)

    def fixed(values: np.ndarray, width: int) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.float32).reshape(-1)), width)

    return pa.table({
        STATE: fixed(ep.qpos, d), ENV_STATE: fixed(one_hot, len(TASKS)), ACTION: fixed(ep.actions, d),
        "timestamp": pa.array((frame_index / fps).astype(np.float32)),
        "frame_index": pa.array(frame_index), "episode_index": pa.array(np.full(n, episode_index, np.int64)),
        "index": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task_index, np.int64)),
    })


def _episode_stats(ep: Episode, table: pa.Table, fps: int) -> dict[str, dict[str, np.ndarray]]:
    """compute_episode_stats over what LeRobot's recorder holds: raw frames, float32 vectors, int64 indices and
    float64 timestamps (frame_index / fps, before the parquet's float32)."""
    stats = {CAMERAS["front"]: image_stats(ep.front), CAMERAS["wrist"]: image_stats(ep.wrist)}
    for key in (STATE, ENV_STATE, ACTION):
        stats[key] = vector_stats(np.asarray(table[key].combine_chunks().flatten()).reshape(len(ep), -1))
    stats["timestamp"] = vector_stats(np.arange(len(ep)) / fps)
    for key in ("frame_index", "episode_index", "index", "task_index"):
        stats[key] = vector_stats(np.asarray(table[key]))
    return stats


def _flat(prefix: str, stats: dict[str, dict[str, np.ndarray]]) -> dict[str, list]:
    return {f"{prefix}/{key}/{k}": np.asarray(v).tolist() for key, s in stats.items() for k, v in s.items()}


def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def _write_tasks(tasks: dict[str, int], root: Path) -> None:
    """meta/tasks.parquet as pandas writes LeRobot's DataFrame (task_index, indexed by the task text), so that
    LeRobot's pd.read_parquet gets the text back as the index."""
    pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None}]}
    table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()),
                      "__index_level_0__": pa.array(list(tasks), pa.large_string())})
    _write_parquet(table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), root / "meta/tasks.parquet")


class _Writer:
    """Streams episodes into data/video files of at most `max_frames_per_file` frames, keeping the metadata."""

    def __init__(self, root: Path, cfg: LeRobotExportConfig, joints: list[str]) -> None:
        self.root, self.cfg, self.joints, self.fps = root, cfg, joints, control_fps()
        self.videos = _VideoFiles(root, cfg, self.fps)
        self.tasks: dict[str, int] = {}  # instruction -> task_index, in order of first use (as LeRobot assigns)
        self.instruction_tasks: dict[str, str] = {}  # instruction -> our task name
        self.episodes: list[dict] = []
        self.episode_stats: list[dict] = []
        self.frames, self.file_number, self.file_frames, self.tables = 0, -1, 0, []
        self.size: int | None = None

    def add(self, path: Path, ep: Episode) -> None:
        self._check(path, ep)
        if not self.tables or self.file_frames + len(ep) > self.cfg.max_frames_per_file:
            self._next_file()
        index = len(self.episodes)
        table = _data_table(ep, index, self.frames, self.tasks.setdefault(ep.instruction, len(self.tasks)), self.fps)
        self.instruction_tasks[ep.instruction] = ep.task
        self.tables.append(table)
        for camera, key in CAMERAS.items():
            self.videos.append(key, getattr(ep, camera))
        where = _file_location(self.file_number)
        row = {"episode_index": index, "tasks": [ep.instruction], "length": len(ep),
               "data/chunk_index": where["chunk_index"], "data/file_index": where["file_index"],
               "dataset_from_index": self.frames, "dataset_to_index": self.frames + len(ep)}
        for key in CAMERAS.values():  # where the episode sits in its camera's mp4
            row |= {f"videos/{key}/chunk_index": where["chunk_index"], f"videos/{key}/file_index": where["file_index"],
                    f"videos/{key}/from_timestamp": self.file_frames / self.fps,
                    f"videos/{key}/to_timestamp": (self.file_frames + len(ep)) / self.fps}
        stats = _episode_stats(ep, table, self.fps)
        self.episodes.append(row | _flat("stats", stats) | {"meta/episodes/chunk_index": 0,
                                                            "meta/episodes/file_index": 0})
        self.episode_stats.append(stats)
        self.frames += len(ep)
        self.file_frames += len(ep)

    def _check(self, path: Path, ep: Episode) -> None:
        if ep.task not in TASKS:
            raise DatasetError(f"{path}: task {ep.task!r} is not one of {task_names()}")
        if len(ep) == 0:
            raise DatasetError(f"{path}: the episode has no frames; expected at least one")
        if joint_names(path) != self.joints:
            raise DatasetError(f"{path}: joint names {joint_names(path)}; expected {self.joints} like the others")
        self.size = self.size or ep.front.shape[1]
        if ep.front.shape[1:] != (self.size, self.size, 3) or ep.wrist.shape[1:] != (self.size, self.size, 3):
            raise DatasetError(f"{path}: images {ep.front.shape[1:]} and {ep.wrist.shape[1:]}; expected "
                               f"({self.size}, {self.size}, 3) like the first episode")

    def _next_file(self) -> None:
        self._flush_data()
        self.file_number, self.file_frames, self.tables = self.file_number + 1, 0, []
        self.videos.open(self.file_number)

    def _flush_data(self) -> None:
        if self.tables:
            _write_parquet(pa.concat_tables(self.tables), self.root / DATA_PATH.format(
                **_file_location(self.file_number)))

    def finish(self) -> dict:
        """Close the last files and write meta/: episodes, tasks, stats and info; info.json's content."""
        self._flush_data()
        self.videos.close()
        _write_parquet(pa.Table.from_pylist(self.episodes), self.root / EPISODES_PATH.format(chunk_index=0,
                                                                                             file_index=0))
        _write_tasks(self.tasks, self.root)
        # For `omni-vla import lerobot --instructions`: each instruction of the dataset -> its one-hot, so the
        # robot's runtime conditions the imported ACT as training did (and refuses any other text).
        table = {text: [float(i == task_names().index(task)) for i in range(len(TASKS))]
                 for text, task in self.instruction_tasks.items()}
        (self.root / INSTRUCTIONS_FILE).write_text(json.dumps({"names": task_names(), "table": table}, indent=1))
        stats = _jsonable(aggregate_stats(self.episode_stats))
        (self.root / "meta/stats.json").write_text(json.dumps(stats, indent=4))
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": "panda", "total_episodes": len(self.episodes),
            "total_frames": self.frames, "total_tasks": len(self.tasks), "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILES_MB, "video_files_size_in_mb": VIDEO_FILES_MB, "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"}, "data_path": DATA_PATH, "video_path": VIDEO_PATH,
            "features": features(self.joints, self.size, self.cfg, self.fps),
        }
        (self.root / "meta/info.json").write_text(json.dumps(info, indent=4))
        return info


def convert(data_dir: Path, out: Path, only_successful: bool = False,
            cfg: LeRobotExportConfig | None = None) -> dict:
    """Every episode file under `data_dir` -> a LeRobotDataset at `out` (created atomically); its info.json."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; expected a new directory for the LeRobotDataset")
    paths = episode_files(data_dir)
    if not paths:
        raise DatasetError(f"no episode files (*.hdf5) under {data_dir}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "meta").mkdir(parents=True)
        writer = _Writer(tmp, cfg or LeRobotExportConfig(), joint_names(paths[0]))
        try:
            for path in paths:
                ep = read_episode(path)
                if ep.success or not only_successful:
                    writer.add(path, ep)
        finally:
            writer.videos.close()
        if not writer.episodes:
            raise DatasetError(f"no successful episodes among the {len(paths)} files under {data_dir}")
        info = writer.finish()
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla dataset", description=__doc__.split("\n\n")[0])
    p.add_argument("format", choices=("lerobot",), help="the dataset format to write")
    p.add_argument("data_dir", type=Path, help="our demonstrations (omni-vla collect's --out)")
    p.add_argument("--out", type=Path, required=True, help="the new dataset directory (must not exist)")
    p.add_argument("--only-successful", action="store_true", help="leave out episodes the expert failed")
    args = p.parse_args(argv)
    info = convert(args.data_dir, args.out, args.only_successful)
    print(f"wrote {info['total_episodes']} episodes ({info['total_frames']} frames at {info['fps']} Hz, "
          f"{info['total_tasks']} instructions) to {args.out}; LeRobot loads it with "
          f"LeRobotDataset('local/omni_vla', root='{args.out}')")
    return 0
