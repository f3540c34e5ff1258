# dnsfleet — two commands do all set-up: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps on one venv: `make run` installs the runtime dependencies only; `make test`
# (and the other developer targets) add the test extras on top. Both install exact versions
# with their hashes from the committed lock (requirements/*.txt, written by `make lock` from
# pyproject.toml's ranges): the same set on every machine, whatever the registry serves today.
LOCK_BUILD := requirements/build.txt
LOCK_RUN := requirements/run.txt
LOCK_TEST := requirements/test.txt
HASH := $(shell cat pyproject.toml $(LOCK_BUILD) $(LOCK_RUN) $(LOCK_TEST) | md5sum | cut -c1-8)
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
STAMP := $(VENV)/.installed-test-$(HASH)
# What `make deb` builds the Debian package with (debian/control's Build-Depends).
DEB_BUILD_DEBS := dpkg-buildpackage:dpkg-dev dh:debhelper dh_python3:dh-python \
             /usr/share/dh-python/dhpython/build/plugin_pyproject.py:pybuild-plugin-pyproject \
             /usr/share/doc/python3-all:python3-all \
             /usr/lib/python3/dist-packages/setuptools:python3-setuptools
BENCH_DEBS := prometheus-blackbox-exporter:prometheus-blackbox-exporter \
              prometheus-node-exporter:prometheus-node-exporter wrk:wrk dnsperf:dnsperf
ARGS ?=
LINT_DIRS := $(wildcard exporter tests bench dashboards deploy alerts requirements)

.PHONY: run test lock test-packaging lint golden venv check-deps bench bench-host bench-soak stack dashboards alerts k8s deb clean

# A new lock starts a new venv (--clear): nothing of an older set stays behind. dnsfleet
# itself goes in last, without dependencies and with the locked setuptools, so nothing is
# resolved here; pip check then proves the locked set satisfies pyproject.toml.
$(RUN_STAMP): pyproject.toml $(LOCK_BUILD) $(LOCK_RUN)
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install -q --require-hashes -r $(LOCK_BUILD)
	$(BIN)/pip install -q --require-hashes -r $(LOCK_RUN)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/pip check -q
	touch $@

$(STAMP): $(RUN_STAMP) $(LOCK_TEST)
	$(BIN)/pip install -q --require-hashes -r $(LOCK_TEST)
	$(BIN)/pip check -q
	touch $@

venv: $(STAMP)

define install_debs
	@missing=""; for pair in $(1); do bin=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$bin >/dev/null 2>&1 || [ -x /usr/sbin/$$bin ] || [ -x /usr/bin/$$bin ] || [ -e "$$bin" ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $$(echo $$missing | tr ' ' '\n' | sort -u) >/dev/null; \
	fi
endef

# What the suite uses beyond the venv is tests/needs.txt (program or file, Debian package):
# install the packages of whatever is missing, then name anything still missing and stop.
check-deps:
	@debs="$$($(PYTHON) tests/harness/needs.py --debs)"; \
	if [ -n "$$debs" ]; then \
	  echo "installing Debian packages: $$debs"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $$debs >/dev/null; \
	fi
	$(PYTHON) tests/harness/needs.py

## make lock: resolve pyproject.toml's ranges (and requirements/*.in) anew into the locked
## versions and hashes that make run, make test and make bench install; review the diff, commit
lock: $(STAMP)
	requirements/lock.sh $(BIN)/uv

## make run: install what is needed and run the exporter on its built-in default
run: $(RUN_STAMP)
	$(BIN)/dnsfleet-exporter $(ARGS)

## make test: install what the tests need and pass them
test: $(STAMP) check-deps
	$(BIN)/ruff check $(LINT_DIRS)
	$(BIN)/ruff format --check $(LINT_DIRS)
	$(BIN)/mypy
	$(BIN)/lint-imports
	tests/packaging/alongside.sh $(BIN)/pytest -q $(ARGS)

## make test-packaging: the .deb installed with apt into a minimal mmdebstrap chroot of each
## Debian release (root; apt traffic to this machine's Debian mirror). make test runs it too.
test-packaging: $(STAMP) check-deps
	$(BIN)/pytest -q -s -p no:cacheprovider -m packaging tests/test_packaging.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_DIRS)
	$(BIN)/ruff format --check $(LINT_DIRS)
	$(BIN)/mypy
	$(BIN)/lint-imports

## make golden: rewrite the golden expositions (the whole /metrics of a fixed configuration,
## and the host collectors' on the x86 fixture tree) from what the code emits now; review the
## diff (git diff tests/fixtures), then commit it
golden: $(STAMP) check-deps
	UPDATE_GOLDEN=1 $(BIN)/pytest -q -n 0 tests/test_golden_exposition.py \
	  tests/test_host_collectors.py::test_golden_exposition_of_x86_tree

## benchmarks (by hand; print ratios against peers installed from Debian and PyPI)
bench: $(STAMP) check-deps
	$(call install_debs,$(BENCH_DEBS))
	$(BIN)/python -m venv --clear .venv-bench && .venv-bench/bin/pip install -q --require-hashes -r requirements/bench.txt
	PYTHONPATH=. $(BIN)/python bench/bench_probe.py $(ARGS)  # the fleet-scale figures
	PYTHONPATH=. $(BIN)/python bench/bench_encrypted.py  # DoT/DoH /probe
	PYTHONPATH=. $(BIN)/python bench/bench_dnstap.py  # dnstap ingest

## make bench-host: dnsfleet's host collectors vs node_exporter's interrupts collector
bench-host: $(STAMP)
	$(call install_debs,$(BENCH_DEBS))
	$(BIN)/python bench/bench_host.py $(ARGS)
	$(BIN)/python bench/bench_host.py --no-cpu-tree $(ARGS)

## make stack: the compose stack on loopback with the native Debian binaries (Ctrl-C stops)
stack: $(STAMP) check-deps
	$(BIN)/python -m tests.stack $(ARGS)

## make dashboards: regenerate dashboards/json from dashboards/generate.py
dashboards: $(STAMP)
	$(BIN)/python -m dashboards.generate

## make deb: build dist/dnsfleet_<version>_all.deb from debian/ (debhelper, dh-python)
deb:
	$(call install_debs,$(DEB_BUILD_DEBS))
	packaging/build-deb.sh

## make alerts: regenerate alerts/rules/slo.rules.yml and every alert's runbook_url from
## alerts/config.yml, then the PrometheusRule that carries the rules
alerts: $(STAMP)
	$(BIN)/python -m alerts.generate $(ARGS)
	$(BIN)/python -m deploy.kubernetes.generate

## make k8s: regenerate deploy/kubernetes (the PrometheusRule from alerts/rules, the rest from generate.yml)
k8s: $(STAMP)
	$(BIN)/python -m deploy.kubernetes.generate

## make bench-soak: N scrapes of many loopback targets; fds and RSS before and after
bench-soak: $(STAMP) check-deps
	$(BIN)/python bench/bench_soak.py $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache dist
