"""Camera frames and joint states into preallocated buffers, checked against plain cv2/numpy: accepted image
sizes, dtypes and encodings, joint order and partial velocities.

Capture times are pinned at their edges: a stamp decides how old the controller thinks its data is, so a wrong
edge either holds a healthy robot (fresh data dated as old) or, worse, moves it on data older than
max_obs_age_s.
"""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from omni_vla.core.perception import (MAX_INSTRUCTION_BYTES, ImageRejected, InstructionRejected, JointStateRejected,
                                      ObservationStore, PolicyImage, decode_compressed)

S = 64


def reference(rgb: np.ndarray) -> np.ndarray:
    """What the policy was trained on: INTER_AREA resize, CHW, float32 / 255."""
    small = cv2.resize(rgb, (S, S), interpolation=cv2.INTER_AREA) if rgb.shape[:2] != (S, S) else rgb
    return (small.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1)[None]


@pytest.fixture
def frame() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)


def test_policy_image_matches_reference_and_fills_the_given_buffer(frame: np.ndarray) -> None:
    prep = PolicyImage(S)
    out = np.full((1, 3, S, S), -1, np.float32)
    ptr = out.ctypes.data
    prep(frame, out)
    assert out.ctypes.data == ptr
    np.testing.assert_array_equal(out, reference(frame))
    assert out.min() >= 0 and out.max() <= 1


def test_resize_goes_through_the_preallocated_buffer(frame: np.ndarray) -> None:
    prep = PolicyImage(S)
    buf = prep._resized
    prep(frame, np.zeros((1, 3, S, S), np.float32))
    assert prep._resized is buf
    np.testing.assert_array_equal(buf, cv2.resize(frame, (S, S), interpolation=cv2.INTER_AREA))


def test_bgr8_is_converted_to_rgb(frame: np.ndarray) -> None:
    out = np.zeros((1, 3, S, S), np.float32)
    PolicyImage(S)(np.ascontiguousarray(frame[:, :, ::-1]), out, encoding="bgr8")
    np.testing.assert_array_equal(out, reference(frame))


@pytest.mark.parametrize("shape", [(480, 640, 3), (64, 64, 3), (37, 90, 3)])
def test_any_reasonable_size_is_resized(shape: tuple[int, int, int]) -> None:
    img = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    out = np.zeros((1, 3, S, S), np.float32)
    PolicyImage(S)(img, out)
    np.testing.assert_array_equal(out, reference(img))


@pytest.mark.parametrize(
    ("image", "encoding", "message"),
    [
        (np.zeros((128, 128, 3), np.float32), "rgb8", "dtype is float32, expected uint8"),
        (np.zeros((128, 128), np.uint8), "rgb8", r"shape is \(128, 128\), expected \[H, W, 3\]"),
        (np.zeros((128, 128, 4), np.uint8), "rgb8", r"expected \[H, W, 3\]"),
        (np.zeros((128, 128, 3), np.uint8), "mono8", "unsupported image encoding 'mono8'"),
        (np.zeros((4, 4, 3), np.uint8), "rgb8", "image size 4x4 outside"),
        ([[1, 2, 3]], "rgb8", "must be a numpy array"),
    ],
)
def test_wrong_images_are_rejected_with_the_reason(image, encoding: str, message: str) -> None:
    out = np.zeros((1, 3, S, S), np.float32)
    with pytest.raises(ImageRejected, match=message):
        PolicyImage(S)(image, out, encoding)
    store = ObservationStore(["a"])
    with pytest.raises(ImageRejected, match=message):
        store.put_image("front", image, encoding)
    assert store.obs["front"] is None and store.stamps["front"] is None


def test_store_keeps_newest_frame_as_rgb_in_a_reused_buffer(frame: np.ndarray) -> None:
    t = [10.0]
    store = ObservationStore(["a"], clock=lambda: t[0])
    store.put_image("wrist", np.ascontiguousarray(frame[:, :, ::-1]), "bgr8")
    buf = store.obs["wrist"]
    np.testing.assert_array_equal(buf, frame)
    t[0] = 11.0
    store.put_image("wrist", frame, "rgb8")
    assert store.obs["wrist"] is buf, "same-size frames reuse the buffer"
    assert store.stamps["wrist"] == 11.0
    store.put_image("wrist", np.zeros((48, 64, 3), np.uint8), "rgb8")
    assert store.obs["wrist"].shape == (48, 64, 3), "a resolution change reallocates once"


def test_joint_state_is_matched_by_name_and_missing_velocity_is_zero() -> None:
    names = [f"j{i}" for i in range(4)]
    store = ObservationStore(names, clock=lambda: 5.0)
    store.put_joints(["extra", "j3", "j1", "j0", "j2"], [9.0, 3.0, 1.0, 0.0, 2.0], [])
    np.testing.assert_array_equal(store.obs["qpos"], [0, 1, 2, 3])
    np.testing.assert_array_equal(store.obs["qvel"], [0, 0, 0, 0])
    store.put_joints(["j0", "j1", "j2", "j3"], [4, 5, 6, 7], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(store.obs["qpos"], [4, 5, 6, 7])
    np.testing.assert_allclose(store.obs["qvel"], [0.1, 0.2, 0.3, 0.4])
    assert store.stamps["joints"] == 5.0


def test_joint_state_without_a_configured_joint_is_rejected_by_name() -> None:
    store = ObservationStore(["j0", "j1", "gripper"])
    with pytest.raises(JointStateRejected, match=r"lacks configured joints \['gripper'\]"):
        store.put_joints(["j0", "j1"], [0.0, 0.0], [])
    with pytest.raises(JointStateRejected, match="3 names but 2 positions"):
        store.put_joints(["j0", "j1", "gripper"], [0.0, 0.0], [])
    assert store.obs["qpos"] is None and store.stamps["joints"] is None


IMG = np.zeros((16, 16, 3), np.uint8)


class Clocks:
    """The loop's clock and the senders' clock (sim time under use_sim_time starts near 0)."""

    def __init__(self, loop: float = 5.0, ros: float = 1000.0) -> None:
        self.loop = loop
        self.ros = ros


def test_a_store_built_without_a_tolerance_trusts_no_stamp_from_the_future() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros + 0.5)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 1


def test_a_small_positive_stamp_early_in_sim_time_is_trusted() -> None:
    c = Clocks(loop=5.0, ros=0.6)
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.05)
    s.put_image("front", IMG, "rgb8", stamp=0.5)
    assert s.stamps["front"] == 5.0 - (0.6 - 0.5) and s.stamp_fallbacks == 0


def test_a_negative_stamp_falls_back_to_arrival_and_is_counted() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.05)
    s.put_joints(["j0"], [0.0], [], stamp=-1.0)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 1
    assert s.last_stamp_fallback == "joints: zero stamp; arrival time used"


def test_a_store_built_without_a_tolerance_trusts_a_stamp_from_now_or_the_past() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros)
    s.put_image("wrist", IMG, "rgb8", stamp=c.ros)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros - 0.25)
    assert s.stamps["wrist"] == c.loop and s.stamps["joints"] == c.loop - 0.25 and s.stamp_fallbacks == 0


def test_a_stamp_exactly_the_tolerance_ahead_is_still_trusted() -> None:
    c = Clocks()
    s = ObservationStore(["j0"], lambda: c.loop, lambda: c.ros, 0.25)
    s.put_joints(["j0"], [0.0], [], stamp=c.ros + 0.25)
    assert s.stamps["joints"] == c.loop and s.stamp_fallbacks == 0


@pytest.mark.parametrize("shape", [(8, 8, 3), (8, 4096, 3), (4096, 8, 3)])
def test_image_sides_from_8_to_4096_pixels_are_accepted(shape: tuple[int, int, int]) -> None:
    img = np.full(shape, 51, np.uint8)
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(img, out)
    np.testing.assert_allclose(out, 0.2)
    ObservationStore(["a"]).put_image("front", img, "rgb8")


@pytest.mark.parametrize("shape", [(7, 64, 3), (64, 7, 3), (4097, 64, 3), (64, 4097, 3)])
def test_image_with_one_side_out_of_range_is_rejected(shape: tuple[int, int, int]) -> None:
    with pytest.raises(ImageRejected, match=f"image size {shape[1]}x{shape[0]} outside 8..4096"):
        PolicyImage(64)(np.zeros(shape, np.uint8), np.zeros((1, 3, 64, 64), np.float32))


@pytest.mark.parametrize("shape", [(64, 100, 3), (100, 64, 3), (32, 64, 3), (64, 32, 3)])
def test_image_with_one_side_already_at_policy_size_is_still_resized(shape: tuple[int, int, int]) -> None:
    img = np.random.default_rng(2).integers(0, 256, shape, dtype=np.uint8)
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(img, out)
    small = cv2.resize(img, (64, 64), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(out, (small.astype(np.float32) / np.float32(255.0)).transpose(2, 0, 1)[None])


@pytest.mark.parametrize("n_vel", [2, 5])
def test_joint_velocities_not_one_per_name_read_as_zero(n_vel: int) -> None:
    store = ObservationStore(["j0", "j1", "j2", "j3"])
    store.put_joints(["j0", "j1", "j2", "j3"], [1.0, 2.0, 3.0, 4.0], [0.5] * n_vel)
    np.testing.assert_array_equal(store.obs["qpos"], [1, 2, 3, 4])
    np.testing.assert_array_equal(store.obs["qvel"], [0, 0, 0, 0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.bool_])
def test_image_of_any_dtype_but_uint8_is_rejected(dtype) -> None:
    with pytest.raises(ImageRejected, match="expected uint8"):
        PolicyImage(64)(np.zeros((64, 64, 3), dtype), np.zeros((1, 3, 64, 64), np.float32))


def test_rgb8_frame_is_stored_unchanged() -> None:
    frame = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    store = ObservationStore(["a"])
    store.put_image("front", frame, "rgb8")
    np.testing.assert_array_equal(store.obs["front"], frame)


def test_joint_order_changing_between_messages_is_followed() -> None:
    names = ["j0", "j1", "j2", "j3"]
    store = ObservationStore(names)
    store.put_joints(names[::-1], [3.0, 2.0, 1.0, 0.0], [])
    np.testing.assert_array_equal(store.obs["qpos"], [0, 1, 2, 3])
    store.put_joints(names, [4.0, 5.0, 6.0, 7.0], [])
    np.testing.assert_array_equal(store.obs["qpos"], [4, 5, 6, 7])


def test_joint_state_of_many_joints_keeps_positions_and_velocities() -> None:
    names = [f"j{i}" for i in range(300)]
    store = ObservationStore(names)
    store.put_joints(names, np.arange(300.0), np.full(300, 0.5))
    np.testing.assert_array_equal(store.obs["qpos"], np.arange(300.0))
    np.testing.assert_array_equal(store.obs["qvel"], np.full(300, 0.5))


def test_bgr8_named_by_a_runtime_string_is_still_converted() -> None:
    encoding = "".join(["bgr", "8"])  # equal to "bgr8", not the same object (e.g. from a ROS message)
    frame = np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    bgr = np.ascontiguousarray(frame[:, :, ::-1])
    out = np.zeros((1, 3, 64, 64), np.float32)
    PolicyImage(64)(bgr, out, encoding)
    np.testing.assert_array_equal(out[0], frame.transpose(2, 0, 1) / np.float32(255.0))
    store = ObservationStore(["a"])
    store.put_image("front", bgr, encoding)
    np.testing.assert_array_equal(store.obs["front"], frame)


@pytest.mark.parametrize("shape", [(64, 64, 3, 1), (64, 64, 2)])
def test_image_that_is_not_three_channel_hwc_is_rejected(shape: tuple[int, ...]) -> None:
    with pytest.raises(ImageRejected, match=r"expected \[H, W, 3\]"):
        PolicyImage(64)(np.zeros(shape, np.uint8), np.zeros((1, 3, 64, 64), np.float32))


def test_joint_state_with_more_positions_than_names_is_rejected() -> None:
    from omni_vla.core.perception import JointStateRejected

    store = ObservationStore(["j0", "j1"])
    with pytest.raises(JointStateRejected, match="2 names but 3 positions"):
        store.put_joints(["j0", "j1"], [0.0, 1.0, 2.0], [])


def test_frame_growing_in_size_is_stored_at_its_new_size() -> None:
    store = ObservationStore(["a"])
    store.put_image("front", np.zeros((48, 64, 3), np.uint8), "rgb8")
    big = np.full((128, 128, 3), 7, np.uint8)
    store.put_image("front", big, "bgr8")
    np.testing.assert_array_equal(store.obs["front"], big)


def test_a_compressed_frame_decodes_to_the_frame_it_was_made_from() -> None:
    frame = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    ok, png = cv2.imencode(".png", frame)
    assert ok and np.array_equal(decode_compressed(png.tobytes(), "png"), frame)


def _giant_png() -> bytes:
    """A PNG whose header claims 100000 x 100000 pixels, with no data behind it."""
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))


@pytest.mark.parametrize("data, message", [(b"", "empty 'jpeg' compressed image"),
                                           (b"not an image at all", "cannot decode 'jpeg'"),
                                           (_giant_png(), "cannot decode 'jpeg'")])
def test_compressed_bytes_opencv_cannot_decode_are_a_rejected_image(data: bytes, message: str) -> None:
    with pytest.raises(ImageRejected, match=message):
        decode_compressed(data, "jpeg")


def test_a_joint_state_with_a_non_finite_position_is_rejected_and_the_last_good_one_kept() -> None:
    store = ObservationStore(["a", "b"], clock=lambda: 5.0)
    store.put_joints(["a", "b"], [0.1, 0.2], [0.0, 0.0])
    with pytest.raises(JointStateRejected, match=r"non-finite positions for \['b'\]"):
        store.put_joints(["b", "a"], [float("nan"), 0.3], [])
    assert store.obs["qpos"].tolist() == [0.1, 0.2]
    store.put_joints(["a", "b", "extra"], [0.3, 0.4, float("nan")], [1.0, float("inf"), 0.0])  # not a joint we use
    assert store.obs["qpos"].tolist() == [0.3, 0.4] and store.obs["qvel"].tolist() == [0.0, 0.0]


def test_an_instruction_longer_than_a_pipe_write_that_never_waits_is_refused_and_the_last_kept() -> None:
    store = ObservationStore(["a"], clock=lambda: 5.0)
    store.set_instruction("pick up the cube")
    store.set_instruction("é" * (MAX_INSTRUCTION_BYTES // 2))  # 2 bytes each: exactly the limit
    with pytest.raises(InstructionRejected, match=f"{MAX_INSTRUCTION_BYTES + 2} bytes, more than {MAX_INSTRUCTION_BYTES}"):
        store.set_instruction("é" * (MAX_INSTRUCTION_BYTES // 2 + 1))
    assert store.obs["instruction"] == "é" * (MAX_INSTRUCTION_BYTES // 2)
