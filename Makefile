# Set-up and the two README commands. The environment is a venv keyed by the
# hash of setup.py (where every dependency is pinned) and by this checkout's path.
SHELL := /bin/bash
VENV ?= $(HOME)/.cache/omni_vla/venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.omni_vla-stamp
WANT := $(shell cat setup.py | sha256sum | cut -c1-16)
HERE := $(CURDIR)
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl
export OMP_NUM_THREADS ?= 1

.PHONY: setup system-deps demo test robot-requirements venv312 test-py312 aarch64 \
	setup-openvino

# EGL/Mesa: headless MuJoCo rendering. FFmpeg's shared libraries (Debian 12 names): torchcodec, LeRobot's video
# decoder in its own test venv (tests/support/lerobot_env.py), links against them.
SYSTEM_PKGS := libegl1 libegl-mesa0 libgl1-mesa-dri libavcodec59 libavformat59 libavutil57 libswscale6 \
	libavdevice59 libavfilter8 libswresample4

system-deps:
	@if ! dpkg -s $(SYSTEM_PKGS) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(SYSTEM_PKGS); \
	  else echo "missing Debian packages: sudo apt-get install $(SYSTEM_PKGS)" >&2; exit 1; fi; \
	fi

setup: system-deps
	@test -x $(PY) || python3 -m venv $(VENV)
	@if [ "$$(cut -d' ' -f1 $(STAMP) 2>/dev/null)" != "$(WANT)" ]; then \
	  echo "[setup] installing pinned dependencies into $(VENV)"; \
	  $(PY) -m pip install -q --upgrade "pip>=25" && \
	  $(PY) -m pip install -q -e ".[all]" && echo "$(WANT) $(HERE)" > $(STAMP); \
	elif [ "$$(cut -d' ' -f2 $(STAMP))" != "$(HERE)" ]; then \
	  echo "[setup] pointing the editable install at $(HERE)"; \
	  $(PY) -m pip install -q --no-deps -e . && echo "$(WANT) $(HERE)" > $(STAMP); \
	fi

# ExecuTorch's OpenVINO delegate: openvino and nncf from PyPI beside the venv (OMNI_VLA_OPENVINO_DIR, default
# ~/.cache/omni_vla/openvino), not in it: openvino 2025.x declares numpy<2.3 against the venv's pin, and the robot
# loads only its C libraries (policies/vla/openvino_delegate.py).
setup-openvino: setup
	$(PY) -m omni_vla_policies.vla.openvino_delegate setup

demo: setup
	$(VENV)/bin/omni-vla demo

# The suite on both cores (pytest-xdist), then the tests that bring up ROS graphs or hold a real-time rate alone
# (tests/conftest.py SERIAL), then the robot path on Python 3.12.
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial" tests
	$(PY) -m pytest -q -m serial tests
	@$(MAKE) --no-print-directory test-py312

# setup.py's requirements, printed by running it against a stand-in setuptools (nothing is built or installed).
SETUP_REQS = python3 -c 'import sys, types; m = types.ModuleType("setuptools"); kw = {}; \
  m.setup = lambda **k: kw.update(k); sys.modules["setuptools"] = m; exec(open("setup.py").read()); \
  print("\n".join(kw["install_requires"] + [r for e in sys.argv[1:] for r in kw["extras_require"][e]]))'

# The robot runtime's pinned requirements (install_requires; ROBOT_EXTRAS=sim adds sim_node's), for a robot's venv:
# see README "Run it on your robot".
robot-requirements:
	@$(SETUP_REQS) $(ROBOT_EXTRAS)

# The robot path on Python 3.12 (Jazzy's Python on Ubuntu 24.04): core, runtime (MNN), inference, cloud, safety and
# the ROS nodes, in a venv with only the robot's requirements (install_requires + the ros-jazzy wheels + the test
# tools): no torch, no MuJoCo, so tests that build bundles with torch or run the simulator stay in the 3.11 suite.
# The venv is keyed by the hash of that requirement set, like `setup`.
PY312 ?= $(HOME)/.pyenv/versions/3.12.1/bin/python3.12
VENV312 ?= $(HOME)/.cache/omni_vla/venv312
ROBOT_TESTS_312 := tests/test_dependencies.py tests/core tests/runtime tests/inference tests/cloud tests/safety \
  tests/tools/test_bench_loop.py tests/ros/test_safety_supervisor_node.py tests/ros/test_interrupt.py tests/ros/test_bench_graph.py \
  tests/ros/test_launch.py::test_launch_files_are_ros2_launch_files_built_from_the_graph_table \
  tests/ros/test_launch.py::test_every_node_has_a_console_script_and_a_parameter_file_for_its_name \
  tests/ros/test_launch_install.py::test_relative_bundle_dir_resolves_under_the_cwd_first_then_the_share_directory \
  tests/ros/test_launch_install.py::test_robot_launch_from_an_install_space_in_an_unrelated_directory \
  tests/ros/test_package_build.py::test_message_published_is_received_over_fast_dds \
  tests/ros/test_vla_node.py::test_image_array_handles_row_padding
# Left to the 3.11 suite: tests that build a bundle with torch (tests/support/fixtures_policy.py), run MuJoCo or talk
# to the sim side's OpenPI server (omni_vla_sim).
NOT_312 := --ignore=tests/runtime/test_runtime_backends.py --ignore=tests/runtime/test_runtime_bundle.py \
  --ignore=tests/runtime/test_runtime_text.py --ignore=tests/inference/test_policy_interface.py \
  --ignore=tests/cloud/test_network_process.py --ignore=tests/cloud/test_openpi_reliability.py \
  --ignore=tests/cloud/test_replanner_triggers.py --ignore=tests/cloud/test_vllm_omni.py \
  --ignore=tests/safety/test_invariants.py --ignore=tests/safety/test_limits_robots.py \
  --ignore=tests/safety/test_neutral_defaults.py --ignore=tests/safety/test_resync.py \
  --deselect=tests/core/test_assembly.py::test_eval_defaults_are_read_from_the_nodes_parameter_file \
  --deselect=tests/core/test_loop_controller.py::test_cloud_plan_longer_than_a_chunk_runs_whole_then_local_chunks_resume \
  --deselect=tests/inference/test_inference.py::test_worker_with_real_mnn_bundle_matches_the_in_process_runtime \
  --deselect=tests/safety/test_bench_safety.py::test_bench_fuzz_reports_steps_and_violations_per_robot_and_rate \
  --deselect=tests/safety/test_bench_safety.py::test_bench_fuzz_in_parallel_processes_runs_the_same_cases \
  --deselect=tests/tools/test_bench_loop.py::test_cloud_runs_are_interleaved_with_local_ones_and_really_splice_plans \
  --deselect=tests/tools/test_bench_loop.py::test_a_loop_that_fails_to_assemble_stops_its_worker_process \
  "--deselect=tests/ros/test_interrupt.py::test_sigterm_to_a_running_node_ends_it_with_exit_0_and_no_traceback[sim_node]"

venv312:
	@if [ ! -x "$(PY312)" ]; then \
	  if [ "$${CI:-}" = true ]; then echo "test-py312: no Python 3.12 at $(PY312)" >&2; exit 1; fi; \
	  echo "test-py312: skipped, no Python 3.12 at $(PY312) (make PY312=/path/to/python3.12)"; exit 0; fi; \
	want=$$( { $(SETUP_REQS) ros test; $(PY312) -V; } | sha256sum | cut -c1-16 ); stamp=$(VENV312)/.omni_vla-stamp; \
	if [ "$$(cut -d' ' -f1 $$stamp 2>/dev/null)" != "$$want" ]; then \
	  echo "[test-py312] installing the robot requirements into $(VENV312)"; rm -rf $(VENV312); \
	  $(PY312) -m venv $(VENV312) && $(VENV312)/bin/python -m pip install -q --upgrade "pip>=25" && \
	  $(VENV312)/bin/python -m pip install -q -r <($(SETUP_REQS) ros test) && \
	  $(VENV312)/bin/python -m pip install -q --no-deps -e . && echo "$$want $(HERE)" > $$stamp; \
	elif [ "$$(cut -d' ' -f2 $$stamp)" != "$(HERE)" ]; then \
	  $(VENV312)/bin/python -m pip install -q --no-deps -e . && echo "$$want $(HERE)" > $$stamp; \
	fi

test-py312: venv312
	@if [ -x "$(PY312)" ]; then \
	  $(VENV312)/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not serial" $(NOT_312) $(ROBOT_TESTS_312) && \
	  $(VENV312)/bin/python -m pytest -q -p no:cacheprovider -m serial $(NOT_312) $(ROBOT_TESTS_312); fi

# The robot path on aarch64 under emulation (qemu-user, an arm64 Debian root, the runtimes' aarch64 wheels): parity of
# the shipped bundle and the ROS-free robot-path tests (benchmarks/aarch64/README.md). Needs root; not part of `test`.
aarch64: setup
	@bash benchmarks/aarch64/run.sh
