"""Camera frames and joint states into preallocated buffers: validation, colour, resize, normalisation.

Two stages, both allocation-free once buffers exist:
- ingest (ObservationStore, called from ROS callbacks): check the frame, convert bgr8 to RGB with
  cvtColor(dst=...) into the newest-frame buffer, and copy joint positions by name;
- policy input (PolicyImage, called by the controller when it requests a chunk): cv2.resize with
  INTER_AREA into a preallocated buffer at the camera's input resolution, then HWC uint8 -> CHW float32
  in [0, 1] in place.
Each property of an input is checked in one place: the message's byte layout in the ROS adapter
(ros/node.py image_array), encoding, dtype, shape and size here, presence and age in the controller,
and the runtime checks only the arrays handed to it (its own API).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import cv2
import numpy as np

from omni_vla.cameras import REFERENCE_CAMERAS, check_camera_name

ENCODINGS = ("rgb8", "bgr8")
# An instruction goes to the worker over a pipe from the loop's thread: at most PIPE_BUF bytes, so writing it never
# waits on a worker busy with a chunk (a pipe holds 64 KiB; a longer text could fill it and stall the tick).
MAX_INSTRUCTION_BYTES = 4096
MIN_SIDE, MAX_SIDE = 8, 4096


class ImageRejected(ValueError):
    """A frame the loop cannot use (wrong dtype, channel count, encoding or size)."""


class JointStateRejected(ValueError):
    """A joint state that does not name every configured joint."""


class InstructionRejected(ValueError):
    """An instruction too long to hand to the worker without waiting."""


def decode_compressed(data: object, fmt: str) -> np.ndarray:
    """A CompressedImage's bytes as a BGR frame. What OpenCV cannot decode (empty, truncated, a header claiming a
    giant frame) is a rejected image, counted like any other, never an exception that ends the node."""
    buf = np.frombuffer(data, np.uint8)  # type: ignore[call-overload]
    if buf.size == 0:
        raise ImageRejected(f"empty {fmt!r} compressed image")
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise ImageRejected(f"cannot decode {fmt!r} compressed image: {str(exc).strip().splitlines()[-1]}") from None
    if img is None:
        raise ImageRejected(f"cannot decode {fmt!r} compressed image")
    return img


def check_encoding(encoding: str) -> None:
    """The one encoding rule (the ROS adapter asks it before decoding a message's bytes)."""
    if encoding not in ENCODINGS:
        raise ImageRejected(f"unsupported image encoding {encoding!r}; expected one of {ENCODINGS}")


def check_image(image: Any, encoding: str = "rgb8") -> None:
    """Raise ImageRejected naming what is wrong; accept any uint8 [H, W, 3] rgb8/bgr8 of sane size."""
    check_encoding(encoding)
    if not isinstance(image, np.ndarray):
        raise ImageRejected(f"image must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ImageRejected(f"image dtype is {image.dtype}, expected uint8")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ImageRejected(f"image shape is {image.shape}, expected [H, W, 3]")
    h, w = image.shape[:2]
    if not (MIN_SIDE <= h <= MAX_SIDE and MIN_SIDE <= w <= MAX_SIDE):
        raise ImageRejected(f"image size {w}x{h} outside {MIN_SIDE}..{MAX_SIDE} pixels per side")


class PolicyImage:
    """RGB uint8 [h, w, 3] -> float32 [1, 3, H, W] in [0, 1], through preallocated buffers."""

    def __init__(self, height: int, width: int | None = None) -> None:
        """The policy's input resolution for this camera (square when `width` is not given)."""
        self.height, self.width = height, height if width is None else width
        self._resized = np.zeros((self.height, self.width, 3), np.uint8)
        self._rgb = np.zeros((self.height, self.width, 3), np.uint8)
        self._scale = np.float32(255.0)

    def __call__(self, image: np.ndarray, out: np.ndarray, encoding: str = "rgb8") -> None:
        check_image(image, encoding)
        h, w = self.height, self.width
        src = image
        if image.shape[0] != h or image.shape[1] != w:
            cv2.resize(image, (w, h), dst=self._resized, interpolation=cv2.INTER_AREA)
            src = self._resized
        if encoding == "bgr8":
            cv2.cvtColor(src, cv2.COLOR_BGR2RGB, dst=self._rgb)
            src = self._rgb
        np.divide(src.transpose(2, 0, 1), self._scale, out=out[0])


class ObservationStore:
    """The newest frames and joint state, written by subscriber callbacks, read by the tick.

    `obs` follows the shared observation contract: one frame per camera under the camera's name
    ("front", "wrist" for the reference policy), "qpos", "qvel", "instruction", plus "stamps" (capture
    times on the loop's `clock`, per camera and "joints"), so the controller checks staleness. Callers
    hold `lock` while reading `obs`; writers take it only for the copy.

    Capture time: a writer may pass the message's own stamp (seconds on `stamp_clock`, the time base
    of the senders: ROS time); its age then is `stamp_clock() - stamp`, and the capture time on the
    loop's clock is the arrival minus that age, so time in transport counts toward staleness. A zero
    stamp, or one more than `max_future_stamp_s` ahead of `stamp_clock` (the sender's clock is skewed),
    is not trusted: arrival time is used and counted in `stamp_fallbacks`.
    """

    def __init__(self, joint_names: Sequence[str], clock: Callable[[], float] = time.perf_counter,
                 stamp_clock: Callable[[], float] | None = None, max_future_stamp_s: float = 0.0,
                 cameras: Sequence[str] = REFERENCE_CAMERAS) -> None:
        """`stamp_clock`: the senders' time base (None: the same as `clock`); `cameras`: the policy's, by name."""
        self.joint_names = list(joint_names)
        self.cameras = tuple(check_camera_name(c) for c in cameras)
        self.clock = clock
        self.stamp_clock = stamp_clock if stamp_clock is not None else clock
        self.max_future_stamp_s = max_future_stamp_s
        self.stamp_fallbacks = 0
        self.last_stamp_fallback = ""
        self.lock = threading.Lock()
        n = len(self.joint_names)
        self.stamps: dict[str, float | None] = {**dict.fromkeys(self.cameras), "joints": None}
        self.obs: dict[str, Any] = {
            **dict.fromkeys(self.cameras), "qpos": None, "qvel": None, "instruction": None, "stamps": self.stamps,
        }
        self._qpos = np.zeros(n, np.float64)
        self._qvel = np.zeros(n, np.float64)
        self._index: tuple[tuple[str, ...], np.ndarray] | None = None

    def captured(self, source: str, stamp: float | None) -> float:
        """Capture time on `clock` of data from `source` stamped `stamp` (None: unstamped, arrival time)."""
        arrival = self.clock()
        if stamp is None:
            return arrival
        if stamp <= 0.0:
            self._fallback(source, "zero stamp")
            return arrival
        age = self.stamp_clock() - stamp
        if age < -self.max_future_stamp_s:
            self._fallback(source, f"stamp {-age:.3f} s ahead of this node's clock")
            return arrival
        return arrival - max(age, 0.0)

    def _fallback(self, source: str, why: str) -> None:
        self.stamp_fallbacks += 1
        self.last_stamp_fallback = f"{source}: {why}; arrival time used"

    def put_image(self, camera: str, image: np.ndarray, encoding: str, stamp: float | None = None) -> None:
        """Copy a validated frame (as RGB) into the camera's buffer; raises ImageRejected."""
        if camera not in self.cameras:
            raise ValueError(f"unknown camera {camera!r}; the policy reads {list(self.cameras)}")
        check_image(image, encoding)
        captured = self.captured(camera, stamp)
        with self.lock:
            buf = self.obs[camera]
            if buf is None or buf.shape != image.shape:
                buf = np.empty(image.shape, np.uint8)  # first frame or a resolution change only
            if encoding == "bgr8":
                cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=buf)
            else:
                np.copyto(buf, image)
            self.obs[camera] = buf
            self.stamps[camera] = captured

    def put_joints(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float],
                   stamp: float | None = None) -> None:
        """Copy positions (and velocities, zero when absent) by joint name; raises JointStateRejected."""
        key = tuple(names)
        if self._index is None or self._index[0] != key:
            missing = [j for j in self.joint_names if j not in key]
            if missing:
                raise JointStateRejected(f"joint state lacks configured joints {missing} (has {list(key)})")
            self._index = (key, np.array([key.index(j) for j in self.joint_names], np.intp))
        if len(position) != len(key):
            raise JointStateRejected(f"joint state has {len(key)} names but {len(position)} positions")
        idx = self._index[1]
        pos = np.asarray(position, np.float64)
        has_vel = len(velocity) == len(key)
        vel = np.asarray(velocity, np.float64) if has_vel else None
        # A NaN kept as the last good state would stay in the command shaper's memory for good.
        if not np.isfinite(pos[idx]).all():
            bad = [j for j, x in zip(self.joint_names, pos[idx]) if not np.isfinite(x)]
            raise JointStateRejected(f"joint state has non-finite positions for {bad}: the last good one is kept")
        if vel is not None and not np.isfinite(vel[idx]).all():
            vel = None  # velocities are only a policy input: zero rather than refuse the positions
        captured = self.captured("joints", stamp)
        with self.lock:
            np.take(pos, idx, out=self._qpos)
            if vel is not None:
                np.take(vel, idx, out=self._qvel)
            else:
                self._qvel[:] = 0.0
            self.obs["qpos"] = self._qpos
            self.obs["qvel"] = self._qvel
            self.stamps["joints"] = captured

    def set_instruction(self, text: str) -> None:
        size = len(text.encode("utf-8"))
        if size > MAX_INSTRUCTION_BYTES:
            raise InstructionRejected(f"instruction of {size} bytes, more than {MAX_INSTRUCTION_BYTES}: the previous "
                                      "one is kept")
        with self.lock:
            self.obs["instruction"] = text
