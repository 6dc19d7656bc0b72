"""Evaluation episodes as ROS 2 bags (MCAP, via the rosbags library): what a robot run would record.

Topics and types follow the interface contract, stamped in simulated time: both cameras
(sensor_msgs/Image rgb8), /joint_states, the supervised command the robot executed
(/forward_position_controller/commands) and the instruction. The bag directory is written next to
its final name and renamed into place, so a crash never leaves a half bag under the real name.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

TOPICS = {
    "front": ("/camera/front/image_raw", "sensor_msgs/msg/Image"),
    "wrist": ("/camera/wrist/image_raw", "sensor_msgs/msg/Image"),
    "joints": ("/joint_states", "sensor_msgs/msg/JointState"),
    "command": ("/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"),
    "instruction": ("/omni_vla/instruction", "std_msgs/msg/String"),
}


def write_bag(path: str | Path, observations: Sequence[dict], commands: np.ndarray, joint_names: Sequence[str],
              period_s: float, instruction: str) -> Path:
    """One episode -> an MCAP bag directory at `path` (replaced atomically if it exists)."""
    from rosbags.rosbag2 import StoragePlugin, Writer  # optional: extra "sim", only for --record *.mcap
    from rosbags.typesys import Stores, get_typestore  # optional: extra "sim", only for --record *.mcap

    if len(observations) != len(commands):
        raise ValueError(f"{len(observations)} observations but {len(commands)} commands")
    ts = get_typestore(Stores.ROS2_JAZZY)
    M = ts.types
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with Writer(tmp, version=9, storage_plugin=StoragePlugin.MCAP) as bag:
        conns = {k: bag.add_connection(topic, msgtype, typestore=ts) for k, (topic, msgtype) in TOPICS.items()}

        def header(ns: int, frame: str) -> object:
            return M["std_msgs/msg/Header"](stamp=M["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                                            frame_id=frame)

        def put(key: str, ns: int, msg: object) -> None:
            bag.write(conns[key], ns, ts.serialize_cdr(msg, TOPICS[key][1]))

        put("instruction", 0, M["std_msgs/msg/String"](data=instruction))
        for k, (obs, cmd) in enumerate(zip(observations, commands)):
            ns = int(round(k * period_s * 1e9))
            for cam in ("front", "wrist"):
                img = np.ascontiguousarray(obs[cam], np.uint8)
                h, w = img.shape[:2]
                put(cam, ns, M["sensor_msgs/msg/Image"](header=header(ns, f"{cam}_camera"), height=h, width=w,
                                                       encoding="rgb8", is_bigendian=0, step=3 * w,
                                                       data=img.reshape(-1)))
            put("joints", ns, M["sensor_msgs/msg/JointState"](
                header=header(ns, ""), name=list(joint_names), position=np.asarray(obs["qpos"], np.float64),
                velocity=np.asarray(obs["qvel"], np.float64), effort=np.zeros(0, np.float64)))
            put("command", ns, M["std_msgs/msg/Float64MultiArray"](
                layout=M["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                data=np.asarray(cmd, np.float64)))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path
