# Two commands do everything on a fresh clone: `make run` and `make test` (see README).
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTHON ?= python3

.PHONY: install run plan reproduce test test-fast ui mlflow-server bench clean

# (Re)install when the venv is missing or the pins changed. torch first and exactly pinned:
# pip then takes the local CPU build instead of downloading a CUDA one (measured).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[test,export,hf]'
	@touch $@

install: $(STAMP)

# The main job (sweeps/main.yaml): dense vs sparse fib fixed vs sparse fib stagger on the embedded
# corpus, and count-ones rot vs fixed, as many cells at once as there are cores (hydra/launcher=cores);
# then the claims these runs can judge, and the tables.
run: $(STAMP)
	$(BIN)/fibexp-train -m --config-dir sweeps --config-name main hydra/launcher=cores
	$(BIN)/fibexp-report --judged --tables

# The whole reproduction (sweeps/reproduce.yaml): every claim's runs at SCALE (cpu, smoke or paper),
# on this machine's cores (LAUNCHER=slurm and ARGS="hydra.launcher.partition=..." for a cluster),
# then one verdict per claim with its criterion. SCALE=smoke grafts into a tiny random Qwen3 (B13),
# written to outputs/tiny-qwen3 first. The plan comes first (docs/reproduction.md): a grid that
# cannot judge a claim its scale serves is refused before anything trains; FORCE=1 runs it anyway.
SCALE    ?= cpu
LAUNCHER ?= cores
FORCE    ?=
REPRODUCE := --config-dir sweeps --config-name reproduce scale=$(SCALE) hydra/launcher=$(LAUNCHER) $(ARGS)

# What `make reproduce` with the same variables will run, which claims it can judge and its cost,
# in seconds, training nothing (PLAN_ARGS="-v": every cell; "--gpu a100 --mfu 0.4": another price).
plan: $(STAMP)
	$(BIN)/fibexp-plan $(REPRODUCE) $(PLAN_ARGS)

reproduce: $(STAMP)
	$(if $(filter smoke,$(SCALE)),test -f outputs/tiny-qwen3/config.json || $(BIN)/python -m fibexp.cli.tiny_qwen outputs/tiny-qwen3)
	$(BIN)/fibexp-plan $(REPRODUCE) $(PLAN_ARGS) $(if $(FORCE),--force)
	$(BIN)/fibexp-train -m $(REPRODUCE)
	$(BIN)/fibexp-report --claims -v

# Every core: one pytest-xdist worker per core, the SLURM tests on one of them (--dist loadgroup).
# Not one more: the suite hardly waits (one process keeps a core 98% busy), and a third worker on
# 2 cores did 12% more CPU work than one process and took longer than two (README). JOBS=0: one process.
JOBS ?= $(shell nproc)
test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup --durations=15

# No slow or cluster tests, on the same workers.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup -m "not slow and not cluster"

# MLflow UI on the default store, local only unless MLFLOW_HOST says otherwise; one worker and no
# job runner (the UI needs neither: plain `mlflow ui` starts a pool of processes). While it serves,
# outputs/mlflow-ui.json says where (host, port, its pid: exec keeps the shell's, and the machine), and the links
# runs on this store print point there without an export.
UI_RECORD = mkdir -p outputs && printf '{"host": "%s", "port": %s, "pid": %s, "hostname": "%s"}\n' '$(MLFLOW_HOST)' \
	  '$(MLFLOW_PORT)' "$$$$" "$$(hostname)" > outputs/mlflow-ui.json
ui: $(STAMP)
	$(UI_RECORD) && MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false exec $(BIN)/mlflow ui \
	  --backend-store-uri sqlite:///$(CURDIR)/outputs/mlflow.db --host $(MLFLOW_HOST) --port $(MLFLOW_PORT) --workers 1

# A tracking server on the project's store, for jobs on other nodes (they log over HTTP:
# logger.tracking_uri=http://<this host>:$(MLFLOW_PORT)). Bound to 127.0.0.1 unless
# MLFLOW_HOST=0.0.0.0; then also pass MLFLOW_ARGS="--allowed-hosts <this host>:$(MLFLOW_PORT)",
# since the server refuses requests whose Host header it does not know (DNS-rebinding guard).
# It serves the UI too, and records where like `make ui`.
MLFLOW_HOST ?= 127.0.0.1
MLFLOW_PORT ?= 5000
mlflow-server: $(STAMP)
	$(UI_RECORD) && MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false exec $(BIN)/mlflow server \
	  --backend-store-uri sqlite:///$(CURDIR)/outputs/mlflow.db \
	  --artifacts-destination $(CURDIR)/outputs/mlartifacts \
	  --host $(MLFLOW_HOST) --port $(MLFLOW_PORT) --workers 1 $(MLFLOW_ARGS)

bench: $(STAMP)
	$(BIN)/fibexp-bench attention
	$(BIN)/fibexp-bench model

clean:
	rm -rf outputs
