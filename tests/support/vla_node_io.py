"""What vla_node is fed in the node tests: the Panda's joint names, an instruction the tiny bundle's embedding
table knows, and camera Image messages."""
from __future__ import annotations

import numpy as np

JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
INSTRUCTION = "pick up the red cube"  # in the tiny bundle's embedding table


def image_msg(rng: np.random.Generator, encoding: str = "rgb8", channels: int = 3):
    from sensor_msgs.msg import Image

    h = w = 128
    data = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    return Image(height=h, width=w, encoding=encoding, step=w * channels, data=data.tobytes())
