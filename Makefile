# gpen-video: every target sets itself up, so each works on a fresh machine by itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test bench demo clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -ra --durations=20

bench: install
	$(PY) benchmarks/model_throughput.py
	$(PY) benchmarks/pipeline_bench.py $(BENCH_ARGS)
	$(PY) benchmarks/decoder_bench.py $(DECODER_BENCH_ARGS)
	$(PY) benchmarks/worker_bench.py $(WORKER_BENCH_ARGS)

demo: install
	$(PY) -m gpen_video.demo

clean:
	rm -rf $(VENV) build *.egg-info
