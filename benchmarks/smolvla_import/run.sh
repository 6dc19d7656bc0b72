#!/usr/bin/env bash
# omni-vla import lerobot on a full-size SmolVLA checkpoint written by LeRobot 0.4.4's own code: import time and
# peak RSS, parity against LeRobot's whole pipeline on ExecuTorch and MNN, per-stage speed at 1 and 2 threads.
#
#   benchmarks/smolvla_import/run.sh [WORK_DIR]        (default /tmp/smolvla_full)
#   benchmarks/smolvla_import/run.sh WORK_DIR sim      the checkpoint for the simulated Panda, imported for
#                                                       ExecuTorch only, to run on the sim graph (benchmarks/soak)
#
# Steps whose output already exists in WORK_DIR are not redone (rm -rf WORK_DIR to start over). Writes
# results/smolvla_import/{import,parity,stages}.json and stages.png.
set -uo pipefail  # a failed step is recorded in WORK/<step>.rc; report.py states where it stopped
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="${1:-/tmp/smolvla_full}"
ROBOT="${2:-}"
OUT="$ROOT/results/smolvla_import"
TASK="pick up the red block and put it in the bowl"
JOINTS="j1,j2,j3,j4,j5,j6"
IMPORT_ARGS=(--rate-hz 30 --gripper j6)
if [ "$ROBOT" = sim ]; then
  JOINTS="panda_joint1,panda_joint2,panda_joint3,panda_joint4,panda_joint5,panda_joint6,panda_joint7,panda_finger_joint1"
  IMPORT_ARGS=(--rate-hz 2 --gripper panda_finger_joint1 --backends executorch)
elif [ -n "$ROBOT" ]; then
  echo "run.sh: robot '$ROBOT': expected nothing (the benchmark's 6-joint robot) or sim" >&2; exit 2
fi
PY="$HOME/.cache/omni_vla/venv/bin/python"
[ -x "$PY" ] || { echo "run.sh: no project venv at $PY" >&2; exit 2; }
# LeRobot's venv, the tests' own (built once when missing: minutes, from PyPI)
SMOL="$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import lerobot_env; print(lerobot_env.lerobot_python())' \
  "$ROOT/tests/support" 2>/dev/null | tail -n1 || true)"
[ -n "$SMOL" ] && [ -x "$SMOL" ] || { echo "run.sh: could not build LeRobot's venv (tests/support/lerobot_env.py lerobot_python)" >&2; exit 2; }
mkdir -p "$WORK" "$OUT"
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

LOAD="$WORK/load.jsonl"   # {"run", "t", "step", "loadavg"}: 1-min load average every 20 s
RUN="$(date +%s)"
STEP="$WORK/.step"
echo start > "$STEP"
( while sleep 20; do printf '{"run": %s, "t": %s, "step": "%s", "loadavg": [%s]}\n' "$RUN" "$(date +%s)" "$(cat "$STEP")" \
    "$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ',')" >> "$LOAD"; done ) &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true' EXIT
step() { echo "$1" > "$STEP"; echo "[$(date +%T)] $1 (load $(cut -d' ' -f1-3 /proc/loadavg))"; }
done_already() { [ -s "$1" ] && { echo "resumed" > "$STEP"; echo "  $1 exists: not redone"; }; }

# The code each run used: HEAD and any uncommitted change under what it runs (a colleague may edit meanwhile).
{ echo "run $RUN $(date -Is)"; git rev-parse HEAD; git status --porcelain -- omni_vla policies tests/support; } >> "$WORK/code.txt"

step checkpoint
"$PY" "$HERE/prepare.py" "$WORK" "$TASK" ${ROBOT:+--robot "$ROBOT"}
if ! done_already "$WORK/ref/io.npz"; then
  rm -rf "$WORK/ref"
  OMP_NUM_THREADS=1 /usr/bin/time -v -o "$WORK/checkpoint.time" \
    "$SMOL" tests/support/smolvla_checkpoint.py "$WORK/ref" "$WORK/spec.json" > "$WORK/checkpoint.log" 2>&1
  echo $? > "$WORK/checkpoint.rc"
fi
CKPT="$WORK/ref/pretrained_model"

[ -f "$WORK/ref/io.npz" ] || { step report; "$PY" "$HERE/report.py" "$WORK" "$OUT" --task "$TASK" --command "benchmarks/smolvla_import/run.sh $WORK"; exit 1; }

step import
if ! done_already "$WORK/bundle/manifest.json"; then
  rm -rf "$WORK/bundle" "$WORK"/.bundle.*
  OMP_NUM_THREADS=1 /usr/bin/time -v -o "$WORK/import.time" \
    "$PY" -m omni_vla.tools.cli import lerobot "$CKPT" --out "$WORK/bundle" --joint-names "$JOINTS" \
      "${IMPORT_ARGS[@]}" > "$WORK/import.log" 2>&1
  echo $? > "$WORK/import.rc"
fi

[ -f "$WORK/bundle/manifest.json" ] || { step report; "$PY" "$HERE/report.py" "$WORK" "$OUT" --task "$TASK" --command "benchmarks/smolvla_import/run.sh $WORK"; exit 1; }

[ "$ROBOT" = sim ] && { echo "[$(date +%T)] done: $WORK/bundle (the sim graph's SmolVLA; no report)"; exit 0; }

step parity
for T in 1 2; do
  done_already "$WORK/parity_t$T.json" && continue
  echo parity > "$STEP"
  "$PY" -m omni_vla_policies.vla.parity_import "$WORK/bundle" "$WORK/ref/io.npz" \
      --task "$TASK" --backends executorch,mnn --threads "$T" > "$WORK/parity_t$T.json" 2> "$WORK/parity_t$T.log"
  echo $? > "$WORK/parity_t$T.rc"
done

step stages
# Robot runtimes only (eager torch and onnxruntime left out); default repetitions; cold start per backend.
done_already "$WORK/stages_raw.json" || "$PY" -m omni_vla_policies.vla.bench_vla "$WORK/bundle" --weights "$CKPT/model.safetensors" \
    --threads 1,2 --backends executorch,mnn --json > "$WORK/stages_raw.json" 2> "$WORK/stages.log" \
    || echo $? > "$WORK/stages.rc"

step report
"$PY" "$HERE/report.py" "$WORK" "$OUT" --task "$TASK" --command "benchmarks/smolvla_import/run.sh $WORK"
echo "[$(date +%T)] done: $OUT"
