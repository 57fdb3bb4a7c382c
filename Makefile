# rig: recipe -> render -> build -> boot -> load -> compare -> report.
# `make help` lists the targets. Recipe from RECIPE=name or positionally: `make build mia-tp4`.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
RIG := $(VENV)/bin/rig
# GNU make exits 2 whenever a recipe fails, whatever the command's own code: a target that runs rig
# through RIG_RUN prints the command, and when rig fails ends with a line naming rig's own exit code
# and what it means (rig/exits.py), then fails with that code (make's "Error N" repeats it).
RIG_RUN = @run() { echo "$$*"; "$$@" || { code=$$?; $(PY) -m rig.exits $$code; exit $$code; }; }; run $(RIG)
POSITIONAL_TARGETS := build up down logs status loadtest compare audit validate rehearse
ifneq ($(filter $(POSITIONAL_TARGETS),$(firstword $(MAKECMDGOALS))),)
  ifneq ($(word 2,$(MAKECMDGOALS)),)
    RECIPE := $(word 2,$(MAKECMDGOALS))
    $(eval $(subst :,\:,$(word 2,$(MAKECMDGOALS))):;@:)
  endif
endif
RECIPE ?= tiny-cpu
SCENARIO ?=
ARMS ?= before:RIG_TOKEN_DELAY_MS=0 after:RIG_TOKEN_DELAY_MS=4
BOOTS ?=
ROUNDS ?=
SIZE ?=
DURATION ?=
TARGET ?=
MAX_BOOTS ?=
PORT ?=
VERBOSE ?=
DRIVER ?=
# The Slurm lab's clients (rig, sinfo, the slurm tests) find its cluster through SLURM_CONF.
ifneq ($(wildcard .rig/slurm/slurm.conf),)
export SLURM_CONF ?= $(CURDIR)/.rig/slurm/slurm.conf
endif

.DEFAULT_GOAL := help
.PHONY: help setup render lint test test-fast test-unit test-e2e prebuild demo build up down logs status loadtest compare audit adapters validate evidence lab lab-down rehearse slurm-lab slurm-lab-down

help: ## this list
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  RECIPE=<name> (default tiny-cpu), or positionally: make build mia-tp4; SIZE=small|full for loadtest/compare"
	@echo "  a target whose rig command fails ends with 'make: rig exited N (...)': rig's own code (make itself exits 2)"

# pip's index settings from the environment, for uv (which reads its own UV_* variables, not pip's)
UV_FROM_PIP := $(if $(PIP_INDEX_URL),--index-url $(PIP_INDEX_URL)) $(foreach u,$(PIP_EXTRA_INDEX_URL),--extra-index-url $(u)) $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))
$(VENV)/.rig-setup: pyproject.toml adapter/pyproject.toml
	python3 -m venv $(VENV)
	@# uv fetches, unpacks and compiles in parallel (a fresh venv in a fraction of pip's time), from the
	@# indexes pip's environment names; pip installs it where uv cannot. Bytecode is compiled at install,
	@# as pip does: where PYTHONDONTWRITEBYTECODE is set, every process would compile its imports again.
	$(PY) -m pip install --quiet "uv>=0.9" && $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) $(UV_FROM_PIP) -e ".[dev]" -e ./adapter \
	  || { $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -e ".[dev]" -e ./adapter; }
	$(PY) -m rig_adapters install-pth
	touch $@

setup: $(VENV)/.rig-setup ## create .venv with everything the host side needs

render: setup ## render docker/, compose/ and k8s/ from recipes/
	$(RIG_RUN) render

validate: setup ## validate one recipe (RECIPE=) or all
	$(RIG_RUN) validate $(if $(filter command line environment,$(origin RECIPE)),$(RECIPE),$(if $(filter validate,$(firstword $(MAKECMDGOALS))),$(word 2,$(MAKECMDGOALS)),))

evidence: setup ## recompute every claimed figure from validation/ (python -m rig.validation)
	$(PY) -m rig.validation

lint: setup ## ruff, recipe validation, freshness of rendered files
	$(VENV)/bin/ruff check .
	$(RIG_RUN) validate
	$(RIG_RUN) render --check

# Where the environment asks Python not to write bytecode (PYTHONDONTWRITEBYTECODE), every pytest
# process would rewrite and compile every test module again and every rig process compile rig's own
# modules again: the suite starts some hundred of them. Its targets write the caches (git ignores them).
test test-fast test-unit test-e2e prebuild: export PYTHONDONTWRITEBYTECODE =

UNIT := not e2e and not docker and not gpu and not timed and not slow and not slurm
TIMED := (timed or slow) and not e2e and not docker and not gpu
TIMING := timed and not e2e and not docker and not gpu
SIM := slow and not timed and not e2e and not docker and not gpu
E2E := not ($(UNIT)) and not ($(TIMED))
# The e2e tests in three lanes of about equal length, one test at a time in each: the docker tests,
# then the Slurm ones; the load, tune, native-boot and host tests; the rest (comparisons, boot state).
LANE_DOCKER := tests/slurm
LANE_LOAD := tests/load tests/tune tests/boot/test_boot_native.py tests/boot/test_boot_offline.py tests/hosts
LANE_OTHERS := $(LANE_DOCKER) $(LANE_LOAD)
PYTEST_LANE = $(VENV)/bin/pytest -q -p no:cacheprovider --durations=10

test-fast: setup ## unit tests: no server boot, no Locust run, no container (everyday work; < 3 min on 2 cores)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -m "$(UNIT)" -n 2 --durations=10

# The docker tests' image, built beside the unit tests when a Docker engine is up (`make lab`): the
# unit tests never depend on timing, the build mostly waits on downloads, and the docker tests' own
# `make build` then reuses its layers. A failed prebuild fails nothing here: the docker tests build
# again and say why. PREBUILD= (empty) leaves it out (CI builds it itself once its lab is up).
PREBUILD := tiny-cpu-docker
prebuild: setup ## build the docker tests' image (tiny-cpu-docker) on the lab's base; log in .rig/prebuild.log
	@mkdir -p .rig; t0=$$SECONDS; ( $(RIG) pin $(PREBUILD) && $(RIG) build $(PREBUILD) ) >.rig/prebuild.log 2>&1; rc=$$?; \
	  echo "== prebuild of $(PREBUILD): exit $$rc in $$((SECONDS - t0)) s"; tail -2 .rig/prebuild.log; exit $$rc

test-unit: setup ## ruff and the unit tests on 2 processes (and the docker tests' image beside them, with a Docker engine up)
	$(VENV)/bin/ruff check .
	@mkdir -p .rig; pre=; if [ -n "$(PREBUILD)" ] && docker info >/dev/null 2>&1; then \
	  echo "== building $(PREBUILD) beside the unit tests (.rig/prebuild.log)"; $(MAKE) --no-print-directory prebuild >.rig/prebuild.out 2>&1 & pre=$$!; fi; \
	  t0=$$SECONDS; $(VENV)/bin/pytest -q -m "$(UNIT)" -n 2 --durations=10; unit=$$?; echo "== part unit: $$((SECONDS - t0)) s"; \
	  if [ -n "$$pre" ]; then wait $$pre; cat .rig/prebuild.out; fi; [ "$$unit" = 0 ]

# The long simulations (`slow`: statistics, no clock, no server) start with the timed tests and run
# beside them and the e2e lanes at the lowest CPU priority: they take the time those leave idle
# (waiting on boots, Slurm and Docker) and yield it whenever a timed or e2e test wants it, so no
# test's timing is theirs to move. The timed tests run first, two at a time; then the e2e lanes.
test-e2e: setup ## the timed tests, then the e2e tests in three lanes, with the slow simulations beside them at the lowest priority
	@mkdir -p .rig; rm -f .rig/test-*.rc; t0=$$SECONDS; \
	  ( nice -n 19 $(VENV)/bin/pytest -q -p no:cacheprovider -m "$(SIM)" -n 2 --durations=10 >.rig/test-sim.log 2>&1; \
	    echo $$? >.rig/test-sim.rc; echo "== lane slow simulations (nice 19): $$((SECONDS - t0)) s" >>.rig/test-sim.log ) & \
	  $(VENV)/bin/pytest -q -p no:cacheprovider -m "$(TIMING)" -n 2 --durations=10; timed=$$?; echo "== part timed: $$((SECONDS - t0)) s"; \
	  t1=$$SECONDS; \
	  ( { $(PYTEST_LANE) -m "docker and $(E2E)"; docker=$$?; echo "== lane docker: $$((SECONDS - t1)) s"; \
	      $(PYTEST_LANE) -m "not docker and $(E2E)" $(LANE_DOCKER); slurm=$$?; echo "== lane docker + slurm: $$((SECONDS - t1)) s"; \
	      echo $$(( docker || slurm )) >.rig/test-docker.rc; } >.rig/test-docker.log 2>&1 ) & \
	  ( { $(PYTEST_LANE) -m "not docker and $(E2E)" $(LANE_LOAD); echo $$? >.rig/test-load.rc; \
	      echo "== lane load/tune/boot/hosts: $$((SECONDS - t1)) s"; } >.rig/test-load.log 2>&1 ) & \
	  $(PYTEST_LANE) -m "not docker and $(E2E)" $(LANE_OTHERS:%=--ignore=%); \
	  echo $$? >.rig/test-rest.rc; rest=$$((SECONDS - t1)); wait; \
	  for lane in docker load sim; do echo "== .rig/test-$$lane.log:"; cat .rig/test-$$lane.log; done; \
	  echo "== lane e2e rest: $$rest s; all lanes: $$((SECONDS - t1)) s; timed and e2e: $$((SECONDS - t0)) s"; \
	  [ "$$timed" = 0 ] && for lane in docker load rest sim; do [ "$$(cat .rig/test-$$lane.rc)" = 0 ] || exit 1; done

test: setup ## the whole suite, as CI runs it: ruff and the unit tests (test-unit), then the timed and e2e tests (test-e2e)
	@$(MAKE) --no-print-directory test-unit && $(MAKE) --no-print-directory test-e2e

demo: setup ## boot tiny-cpu, stream a chat, load test, compare until decided, shut down (PORT=N: another port; VERBOSE=1: every table)
	$(RIG_RUN) demo $(if $(PORT),--port $(PORT),) $(if $(VERBOSE),--verbose,)

build: setup ## build a recipe's image (needs a Docker engine)
	$(RIG_RUN) build $(RECIPE)

up: setup ## boot a recipe and wait until healthy
	$(RIG_RUN) up $(RECIPE) $(if $(DRIVER),--driver $(DRIVER),)

down: setup ## stop a booted recipe
	$(RIG_RUN) down $(RECIPE)

logs: setup ## print a recipe's boot log
	$(RIG_RUN) logs $(RECIPE)

status: setup ## what is up
	$(RIG_RUN) status

loadtest: setup ## Locust load test against RECIPE (SCENARIO= to pick; VERBOSE=1: every column and note)
	$(RIG_RUN) loadtest $(RECIPE) $(if $(SCENARIO),--scenario $(SCENARIO),) $(if $(SIZE),--$(SIZE),) $(if $(VERBOSE),--verbose,)

compare: setup ## before/after comparison across boots (ARMS=, BOOTS=, ROUNDS=, DURATION=, TARGET=1 MAX_BOOTS=8, DRIVER=slurm; rig's defaults otherwise)
	$(RIG_RUN) compare $(RECIPE) $(foreach a,$(ARMS),--arm $(a)) $(if $(BOOTS),--boots $(BOOTS),) $(if $(ROUNDS),--rounds $(ROUNDS),) $(if $(SIZE),--$(SIZE),) $(if $(DRIVER),--driver $(DRIVER),) \
	  $(if $(DURATION),--duration $(DURATION),) $(if $(TARGET),--target $(TARGET),) $(if $(MAX_BOOTS),--max-boots $(MAX_BOOTS),)

audit: setup ## GEMM shape audit of a recipe against backend constraints
	$(RIG_RUN) audit $(RECIPE)

adapters: setup ## the adapter registry and its drift matrix
	$(RIG_RUN) adapters list
	$(RIG_RUN) adapters check

lab: setup ## container lab: dockerd, registry on 127.0.0.1:5000, Debian base image, compose plugin (idempotent)
	lab/lab.sh up

lab-down: ## stop what `make lab` started (keeps .rig/lab caches and registry storage)
	lab/lab.sh down

slurm-lab: ## a real 2-node Slurm cluster on this machine: munged, slurmctld, slurmd n1 and n2 (no systemd; idempotent)
	lab/slurm.sh up

slurm-lab-down: ## stop the Slurm lab's daemons (keeps .rig/slurm: config and logs)
	lab/slurm.sh down

rehearse: setup ## build a GPU recipe's Dockerfile unchanged on the lab's STAND-IN base and arm its adapters
	$(PY) -m rig.boot.rehearse rehearse $(RECIPE)
