"""A LeRobot checkpoint served by LeRobot's own code over the OpenPI websocket protocol (in LeRobot's venv only).

    python lerobot_server.py CHECKPOINT_DIR PORT_FILE      (PYTHONPATH: a directory holding openpi-client,
                                                             msgpack and websockets: lerobot_env.served_python())

Loads the `pretrained_model` directory with LeRobot's factory (the policy class named by its config.json, the
pre/post-processor pipelines it saved) and answers each request the way a robot would ask LeRobot: the raw
observation (LeRobot feature names: `observation.images.<camera>` float32 [3, H, W] in [0, 1],
`observation.state`, optionally `observation.environment_state`, and `task`) -> preprocessor ->
`predict_action_chunk` (with the request's `noise` for a flow-matching policy) -> postprocessor -> {"actions": [H, D]}.
Frames are encoded with openpi-client's own msgpack_numpy. The port it bound is written to PORT_FILE; /healthz
answers 200.
"""
from __future__ import annotations

import asyncio
import http
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from openpi_client import msgpack_numpy  # noqa: E402
from websockets.asyncio.server import serve  # noqa: E402
from smolvla_vlm import stand_in_for_checkpoint  # noqa: E402


def load(checkpoint: Path):
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    kind = json.loads((checkpoint / "config.json").read_text())["type"]
    stand_in_for_checkpoint(checkpoint)
    policy = get_policy_class(kind).from_pretrained(checkpoint).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(checkpoint))
    return kind, policy, pre, post


def padded_noise(noise: np.ndarray, config) -> torch.Tensor:
    """[1, H, max_action_dim]: the request's [H, D] noise, zero beyond the action's D (as the bundle pads it)."""
    out = torch.zeros(1, noise.shape[0], getattr(config, "max_action_dim", noise.shape[1]))
    out[0, :, :noise.shape[1]] = torch.from_numpy(np.array(noise))
    return out


def main(checkpoint: Path, port_file: Path) -> None:
    torch.set_num_threads(1)
    kind, policy, pre, post = load(checkpoint)
    packer = msgpack_numpy.Packer()

    @torch.no_grad()
    def act(obs: dict) -> dict:
        batch = {k: (torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v)
                 for k, v in obs.items() if k != "noise"}
        extra = {"noise": padded_noise(obs["noise"], policy.config)} if "noise" in obs else {}
        chunk = post(policy.predict_action_chunk(pre(batch), **extra))
        return {"actions": chunk.numpy()[0].astype(np.float32)}

    async def handler(ws) -> None:
        await ws.send(packer.pack({"policy": kind, "served_by": "lerobot"}))
        async for message in ws:
            await ws.send(packer.pack(act(msgpack_numpy.unpackb(message))))

    def health(connection, request):
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        return None

    async def run() -> None:
        async with serve(handler, "127.0.0.1", 0, process_request=health, max_size=None,
                         compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            tmp = port_file.with_suffix(".tmp")
            tmp.write_text(str(port))
            tmp.replace(port_file)
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: lerobot_server.py CHECKPOINT_DIR PORT_FILE")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
