#!/usr/bin/env bash
# The robot path on aarch64, under emulation: an arm64 Debian root (debootstrap) run through qemu-user (binfmt_misc),
# a venv in it with the robot's requirements as aarch64 wheels from PyPI plus MuJoCo and the test tools, then the ROS-free
# robot-path tests and the parity of the shipped bundle on every robot runtime against eager PyTorch on this machine.
#
#   make aarch64 [ARM64_ROOT=~/.cache/omni_vla/arm64root] [ARM64_TESTS="tests/core ..."] [ARM64_OUT=dir]
#
# Needs root (apt-get, debootstrap, mount, chroot). Speed under emulation says nothing about an ARM board's.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
ROOT=${ARM64_ROOT:-$HOME/.cache/omni_vla/arm64root}
OUT=${ARM64_OUT:-$HERE/results/aarch64}
HOST_PY=${HOST_PY:-$HOME/.cache/omni_vla/venv/bin/python}
TESTS=${ARM64_TESTS:-tests/core tests/runtime tests/inference tests/safety}
# Left out: tests that build bundles with torch, and the three that need rclpy (no aarch64 ros-jazzy wheels here).
# The supervisor's oracle and fuzz tests run: MuJoCo (its aarch64 wheel) compiles the real robot descriptions.
# Also left out: eager torch's entry point (registered by installing the package; here it runs from a path) and a
# worker started with a 5 s start-up budget, which loading under emulation may exceed.
IGNORE="--ignore=tests/runtime/test_runtime_backends.py --ignore=tests/runtime/test_runtime_bundle.py
  --ignore=tests/runtime/test_runtime_text.py --ignore=tests/inference/test_policy_interface.py --ignore=tests/safety/test_bench_safety.py
  --ignore=tests/safety/test_shared_helpers.py --ignore=tests/inference/test_worker_spawn.py
  --deselect=tests/safety/test_independence.py::test_importing_every_safety_module_loads_no_runtime_policy_or_sim_code
  --deselect=tests/core/test_assembly.py::test_eval_defaults_are_read_from_the_nodes_parameter_file
  --deselect=tests/core/test_loop_controller.py::test_cloud_plan_longer_than_a_chunk_runs_whole_then_local_chunks_resume
  --deselect=tests/inference/test_inference.py::test_worker_with_real_mnn_bundle_matches_the_in_process_runtime
  --deselect=tests/runtime/test_registry.py::test_eager_torch_is_a_registered_entry_point_not_a_runtime_import
  --deselect=tests/inference/test_inference.py::test_the_hang_bound_never_exceeds_the_start_up_budget"

step() { echo "[aarch64] $*"; }

if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
  step "installing qemu-user-static and debootstrap (Debian packages)"
  apt-get update -qq && apt-get install -y -qq qemu-user-static debootstrap
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  step "registering qemu-aarch64 with binfmt_misc"
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
    > /proc/sys/fs/binfmt_misc/register
fi
if [ ! -x "$ROOT/usr/bin/python3" ]; then
  step "debootstrap: an arm64 Debian 12 root in $ROOT"
  debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$ROOT" >"$ROOT.debootstrap.log" 2>&1 || { tail -20 "$ROOT.debootstrap.log"; exit 1; }
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's CA bundle (it may hold a proxy's certificate that the fresh root does not know) for pip in the root.
cp "${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}" "$ROOT/etc/ssl/certs/host-ca.crt"
REQS=$(cd "$HERE" && make -s robot-requirements)
MUJOCO=$(grep -o '"mujoco==[^"]*"' "$HERE/setup.py" | tr -d '"')  # the sim extra's pin: the oracle's robot models
REQS=$(printf '%s\n%s' "$REQS" "$MUJOCO")
WANT=$( { echo "$REQS"; echo pytest hypothesis; } | sha256sum | cut -c1-16)
if [ "$(cat "$ROOT/venv/.stamp" 2>/dev/null)" != "$WANT" ]; then
  step "the robot's requirements as aarch64 wheels into $ROOT/venv (pip under emulation: minutes)"
  rm -rf "$ROOT/venv"
  chroot "$ROOT" python3 -m venv /venv
  echo "$REQS" > "$ROOT/tmp/requirements.txt"
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin /venv/bin/python -m pip install -q --cert /etc/ssl/certs/host-ca.crt \
    --only-binary :all: -r /tmp/requirements.txt pytest hypothesis
  echo "$WANT" > "$ROOT/venv/.stamp"
fi
step "recording eager PyTorch and each runtime on this machine ($(uname -m))"
mkdir -p "$OUT" "$ROOT/repo" "$ROOT/shim"
"$HOST_PY" "$HERE/benchmarks/aarch64/parity.py" record --bundle "$HERE/bundles/reference" --out "$ROOT/tmp/ref.npz"
# Mounts left by an earlier run (of another checkout, say) go first: /repo must be this checkout.
for d in repo proc dev; do while mountpoint -q "$ROOT/$d"; do umount -l "$ROOT/$d"; done; done
mount --bind "$HERE" "$ROOT/repo"
for d in proc dev; do mount --bind "/$d" "$ROOT/$d"; done
trap 'for d in repo proc dev; do umount -l "$ROOT/$d" 2>/dev/null || true; done' EXIT
ln -sfn /repo/safety "$ROOT/shim/omni_vla_safety"
ln -sfn /repo/omni_vla "$ROOT/shim/omni_vla"
ln -sfn /repo/sim "$ROOT/shim/omni_vla_sim"  # the simulated Panda's MJCF, checked against MuJoCo by the oracle tests
# MuJoCo compiles the robot descriptions only: no renderer (and no libEGL) on the robot path.
RUN="cd /repo && PYTHONPATH=/shim:/repo/tests/support PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 MUJOCO_GL=disable"
step "parity of bundles/reference on aarch64"
chroot "$ROOT" /bin/sh -c "$RUN /venv/bin/python benchmarks/aarch64/parity.py check --bundle bundles/reference \
  --ref /tmp/ref.npz" | tail -1 > "$OUT/parity.json"
cat "$OUT/parity.json"
step "the robot-path tests on aarch64: $TESTS"
status=0  # a failing test still gets its summary into the JSON; the exit code says it failed
chroot "$ROOT" /bin/sh -c "$RUN /venv/bin/python -m pytest -q -p no:cacheprovider $(echo $IGNORE) $TESTS" \
  | tee "$OUT/tests.log" | tail -5 || status=$?
cd "$HERE"
"$HOST_PY" - "$OUT" "$TESTS" <<'PY'
import json, subprocess, sys
from pathlib import Path
out = Path(sys.argv[1])
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines = (out / "tests.log").read_text().strip().splitlines()
report = {"command": "make aarch64", "commit": commit, "parity": json.loads((out / "parity.json").read_text()),
          "tests": sys.argv[2], "tests_summary": lines[-1], "tests_failed": [ln for ln in lines if ln.startswith("FAILED")]}
tmp = out / "aarch64.json.tmp"
tmp.write_text(json.dumps(report, indent=1) + "\n")
tmp.replace(out / "aarch64.json")
print(json.dumps(report))
PY
exit "$status"
