"""Independent safety supervisor: joint limits, fail-closed limiting, watchdog and e-stop.

Imports nothing from the rest of omni_vla (runtime, policies, sim) and no torch, ExecuTorch,
MNN or MuJoCo: it must keep working when everything else has failed.
Modules: limits / limits_sources (ros2_control YAML, URDF, MJCF), validation (fail-closed
checks), limiter (per-command limiting), supervisor (state machine, fake-clock testable),
config (parameters), node (ROS 2 shell, `safety_supervisor`), bench (`omni-vla bench safety`).
"""
