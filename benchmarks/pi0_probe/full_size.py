"""pi0 at full size (LeRobot's defaults: gemma_2b + gemma_300m, 3.3 B parameters used at inference) through
`omni-vla import lerobot`, then timed on ExecuTorch. Prints JSON; each phase's wall time and peak RSS
(`/usr/bin/time -v`, the process and the children it waited for).

    python benchmarks/pi0_probe/full_size.py WORK [--policy pi0|pi05] [--shapes published|probe] [--quantize int8|none]

Phases: LeRobot 0.6.1 writes the checkpoint (probe.py --size default in the pi0 test venv, ~18 GB RSS, 16 GB on
disk; skipped when WORK/<policy>/pretrained_model exists) -> the import (ExecuTorch only) -> `omni-vla bench runtime`
on the bundle. A phase that fails is recorded with its exit code and the last line it printed, and the run stops;
a phase whose result is in WORK from an earlier run (checkpoint, import) is reported from there, not run again.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = Path.home() / ".cache" / "omni_vla"
JOINTS = "j1,j2,j3,j4,j5,j6"


def timed(cmd: list[str], log: Path) -> dict:
    """Run `cmd` under /usr/bin/time -v; its exit code, wall seconds, peak RSS (GB) and last output line."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t, log.open("w") as out:
        rc = subprocess.run(["/usr/bin/time", "-v", "-o", t.name, *cmd], stdout=out, stderr=subprocess.STDOUT).returncode
        text = Path(t.name).read_text()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    seconds = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.group(1).split(":")))) if wall else None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return {"cmd": " ".join(cmd), "exit": rc, "seconds": seconds,
            "peak_rss_gb": round(int(rss.group(1)) / 1e6, 2) if rss else None, "last_line": lines[-1] if lines else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--policy", choices=["pi0", "pi05"], default="pi0")
    ap.add_argument("--quantize", choices=["int8", "none"], default="int8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", choices=["probe", "published"], default="published",
                    help="sequence sizes of the checkpoint (benchmarks/pi0_probe/probe.py --shapes)")
    a = ap.parse_args()
    venvs = sorted(VENV.glob("pi0-*/bin/python"))
    if not venvs:
        print(f"no pi0 test venv under {VENV} (pi0-*/): run tests/policies/test_import_pi0.py once to build it",
              file=sys.stderr)
        return 2
    a.work.mkdir(parents=True, exist_ok=True)
    ck = a.work / f"{a.policy}_{a.shapes}"
    bundle = a.work / f"bundle_{a.policy}_{a.shapes}_{a.quantize}"
    report: dict = {"policy": a.policy, "shapes": a.shapes, "quantize": a.quantize, "phases": {}}
    omni = [sys.executable, "-m", "omni_vla.tools.cli"]
    phases = {
        "checkpoint": [str(venvs[0]), str(HERE / "probe.py"), "--policy", a.policy, "--size", "default", "--shapes",
                       a.shapes, str(ck)],
        "import": [*omni, "import", "lerobot", str(ck / "pretrained_model"), "--out", str(bundle), "--joint-names",
                   JOINTS, "--rate-hz", "30", "--gripper", "j6", "--backends", "executorch",
                   "--tokenizer", str(ck / "standin_tokenizer" / "tokenizer.json"),
                   *(["--quantize", a.quantize] if a.quantize != "none" else [])],
        "bench": [*omni, "bench", "runtime", "--bundle", str(bundle), "--backends", "executorch", "--threads",
                  a.threads, "--reps", "3", "--warmup", "1", "--no-cold-start", "--json"],
    }
    for name, cmd in phases.items():
        done = {"checkpoint": ck / "pretrained_model" / "model.safetensors", "import": bundle / "manifest.json"}
        if name in done and done[name].is_file() and (a.work / f"{name}.json").is_file():
            report["phases"][name] = {**json.loads((a.work / f"{name}.json").read_text()), "reused": True}
            continue
        res = report["phases"][name] = timed(cmd, a.work / f"{name}.log")
        if res["exit"] != 0:
            break
        if name == "bench":
            lines = (a.work / "bench.log").read_text().splitlines()  # the runtimes' own logs share the stream
            res["result"] = json.loads(next(ln for ln in reversed(lines) if ln.startswith('[{"bundle"')))
        if name == "import":
            manifest = json.loads((bundle / "manifest.json").read_text())
            res["parity_db"] = manifest["source"]["parity_db"]
            res["bundle_gb"] = round(sum(p.stat().st_size for p in bundle.iterdir()) / 1e9, 2)
        (a.work / f"{name}.json").write_text(json.dumps(res))
    print(json.dumps(report, indent=1))
    return 0 if all(p.get("exit", 0) == 0 for p in report["phases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
