# `make demo` and `make test` do all set-up on a fresh Debian 12 or 13 machine (or Ubuntu 24.04); both
# are idempotent and quick once everything is present.
SHELL := /bin/bash
# uv trusts what the system trusts (/etc/ssl/certs), as pip and apt do: behind an intercepting HTTPS
# proxy whose CA the machine has installed, its own bundled roots would refuse PyPI.
export UV_NATIVE_TLS := 1
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# What the demo needs: its servers and tools, and what the venv builds (mysqlclient compiles against
# libmariadb with gcc and the Python headers; Debian's python3 makes a venv only with python3-venv).
DEMO_PACKAGES := mariadb-server mariadb-backup mariadb-client gnupg zstd procps \
                 python3-venv gcc libc6-dev python3-dev libmariadb-dev pkg-config
# ...and what the suites need besides (debootstrap: the MySQL 9.7 and MariaDB 11.8 roots).
DEB_PACKAGES := $(DEMO_PACKAGES) percona-toolkit sysbench strace redis-server chromium debootstrap \
                debian-archive-keyring git

.PHONY: setup deps demo-deps test unit lint docs demo bench clean lock soak chaos chaos-smoke chaos-planted test-wheel envs ci \
        test-airflow-3.1 lock-airflow-3.1 test-airflow-3.2 lock-airflow-3.2 server-roots test-mysql \
        test-mariadb-11.8 test-fresh-debian test-quick

setup: deps $(STAMP)
	@# Our own modules too (PYTHONDONTWRITEBYTECODE may be set): each CLI call and DAG parse imports them.
	@$(PY) -m compileall -q provider dags scripts bench > /dev/null

deps:
	@scripts/install-debian-deps.sh $(DEB_PACKAGES)

demo-deps:
	@scripts/install-debian-deps.sh $(DEMO_PACKAGES)

# An editable install's build leaves a second copy of our metadata in provider/ (on sys.path), and
# Airflow then loads the Backups view plugin twice ("already registered, skipping"): removed.
DROP_EGG_INFO := rm -rf provider/*.egg-info

# constraints.txt pins the whole dependency tree so CI installs what we tested; it is resolved for
# Python 3.11.2 (Debian 12's), the oldest Python the project supports.
$(STAMP): pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory demo-deps
	@test -x $(PY) || "$$(scripts/find-python.sh 3)" -m venv $(VENV)
	@$(VENV)/bin/pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints.txt -e '.[test,docs]'
	@$(DROP_EGG_INFO)
	@# Byte-compile once: with PYTHONDONTWRITEBYTECODE set, every process would recompile Airflow.
	@$(PY) -m compileall -q -j0 $(VENV)/lib > /dev/null || true
	@touch $@ $(DEMO_STAMP)

# The demo's venv: Airflow, the provider and moto's S3 server (the `demo` extra), nothing for the
# suites or the docs.
$(DEMO_STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || "$$(scripts/find-python.sh 3)" -m venv $(VENV)
	@$(VENV)/bin/pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints.txt -e '.[demo]'
	@$(DROP_EGG_INFO)
	@$(PY) -m compileall -q -j0 $(VENV)/lib > /dev/null || true
	@touch $@

lint: setup
	$(VENV)/bin/ruff check provider dags tests bench scripts
	$(VENV)/bin/ruff format --check -q provider dags tests bench scripts
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml): every page, link and anchor must resolve (not with -q:
# mkdocs then counts no warning and strict passes).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

# Lint, the docs build and every suite but the `slow` soak (scripts/ci.sh): on Airflow 3.3, 3.1 and
# 3.2 (Python 3.13), the deployment test from the wheel, MySQL 9.7 and MariaDB 11.8, and `make demo`
# in fresh Debian 12 and 13 roots. .ci/run runs exactly this.
test: setup
	@scripts/ci.sh

# The Airflow 3.3 suites alone, serially (quicker to read; no other server, minor or fresh root).
test-quick: setup lint
	@scripts/run-pytest.sh -m "not slow and not mysql" --ignore=tests/deployment $(PYTEST_ARGS)

# The deployment test from the wheel `uv build` makes, installed outside the checkout.
test-wheel: setup
	@scripts/test-wheel.sh $(PYTEST_ARGS)

ci: test

# The other servers' programs, each from a minimal Debian root of the suite that packages it (MySQL
# 9.7 from sid, MariaDB 11.8 from trixie), built once and kept (scripts/server-roots.sh).
ROOTS ?= $(or $(XBP_SERVER_ROOTS),/var/lib/xtrabackup-provider/roots)
server-roots:
	@scripts/server-roots.sh $(ROOTS)

# The MySQL suites (tests marked `mysql`) against a real MySQL 9.7, its programs first on PATH.
test-mysql: setup server-roots
	@PATH=$(ROOTS)/mysql-9.7/bin:$$PATH scripts/run-pytest.sh -m "mysql and not slow" tests/mysql $(PYTEST_ARGS)

# The MariaDB suites again with MariaDB 11.8's server and tools first on PATH: by default the ones
# that prove each path on 11.8 (backup, incremental chain + prepare, restore, restore test, PITR,
# binlog shipping, standby, provisioning, the checksum gate, deep verify, K-part streams, a tool
# older than the server refused, and the backup / restore-test / checksum-gate DAGs): 83 tests,
# about 15 minutes beside the other suites. MARIADB_11_8_TESTS=tests/integration runs them all.
IT := tests/integration
MARIADB_11_8_TESTS ?= $(IT)/test_full_backup.py $(IT)/test_incremental_chain.py $(IT)/test_restore_test.py \
	$(IT)/test_pitr.py $(IT)/test_binlog.py $(IT)/test_standby.py $(IT)/test_provision_replica.py \
	$(IT)/test_consistency.py $(IT)/test_verify.py $(IT)/test_parts.py $(IT)/test_tool_server_versions.py \
	$(IT)/test_pitr_replica_restart_time.py $(IT)/test_restore_test_roll_lease.py $(IT)/test_pitr_connections.py \
	tests/dags/test_backup_dag.py tests/dags/test_restore_test_dag.py tests/dags/test_checksum_gate_dag.py
test-mariadb-11.8: setup server-roots
	@PATH=$(ROOTS)/mariadb-11.8/bin:$$PATH scripts/run-pytest.sh -m "not mysql and not slow" \
		$(MARIADB_11_8_TESTS) $(PYTEST_ARGS)

# The README's `make demo` in fresh minimal Debian 12 and 13 roots (scripts/fresh-debian-demo.sh).
test-fresh-debian:
	@scripts/fresh-debian-demo.sh bookworm trixie

# The oldest Airflow minor pyproject.toml admits: the unit and DAG suites on Airflow 3.1.8 with a
# resolution dated by its release (Airflow's own constraint files are not reachable from CI).
AF31 := .venv-airflow-3.1
test-airflow-3.1: deps $(AF31)/.installed
	@PYTEST=$(AF31)/bin/pytest scripts/run-pytest.sh -m "not slow" tests/unit tests/dags $(PYTEST_ARGS)

$(AF31)/.installed: pyproject.toml constraints-airflow-3.1.txt $(STAMP)
	@test -x $(AF31)/bin/python || python3 -m venv --without-pip $(AF31)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(AF31)/bin/python \
		-c constraints-airflow-3.1.txt -e '.[test]'
	@$(DROP_EGG_INFO)
	@# Our own modules for this interpreter too (PYTHONDONTWRITEBYTECODE may be set).
	@$(AF31)/bin/python -m compileall -q provider dags scripts > /dev/null
	@touch $@

lock-airflow-3.1:
	echo apache-airflow==3.1.8 | $(VENV)/bin/uv pip compile -q --python $(PY) --extra test \
		--exclude-newer 2026-03-12T00:00:00Z pyproject.toml - -o constraints-airflow-3.1.txt

# Airflow 3.2 on Python 3.13 (the newest Python CI runs): the unit and DAG suites, with a
# resolution dated by 3.2.2's release. The interpreter: scripts/find-python.sh.
AF32 := .venv-airflow-3.2-py3.13
test-airflow-3.2: deps $(AF32)/.installed
	@PYTEST=$(AF32)/bin/pytest scripts/run-pytest.sh -m "not slow" tests/unit tests/dags $(PYTEST_ARGS)

$(AF32)/.installed: pyproject.toml constraints-airflow-3.2-py3.13.txt $(STAMP)
	@test -x $(AF32)/bin/python || "$$(scripts/find-python.sh 3.13)" -m venv --without-pip $(AF32)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(AF32)/bin/python \
		-c constraints-airflow-3.2-py3.13.txt -e '.[test]'
	@$(DROP_EGG_INFO)
	@# Our own modules for this interpreter too (PYTHONDONTWRITEBYTECODE may be set).
	@$(AF32)/bin/python -m compileall -q provider dags scripts > /dev/null
	@touch $@

lock-airflow-3.2:
	echo apache-airflow==3.2.2 | $(VENV)/bin/uv pip compile -q --python-version 3.13 --extra test \
		--exclude-newer 2026-05-30T00:00:00Z pyproject.toml - -o constraints-airflow-3.2-py3.13.txt

# The second suites' environments (CI builds them while lint runs).
envs: setup $(AF31)/.installed $(AF32)/.installed

soak: setup
	@scripts/run-pytest.sh -m slow $(PYTEST_ARGS)

# A fleet under random faults with an independent checker (docs/RELIABILITY.md): 60 minutes of
# faults by default; CHAOS_MINUTES=N shortens it, CHAOS_SEED replays a run. libfaketime skews one
# CLI's clock.
chaos: setup
	@scripts/install-debian-deps.sh libfaketime
	@PYTHONPATH=tests:tests/deployment:tests/chaos $(PY) tests/chaos/run.py

# A few minutes of every fault kind (a fixed seed: the same schedule each time) for CI; the fleet's
# start-up and the final checks come on top (docs/RELIABILITY.md has the wall time).
chaos-smoke:
	@CHAOS_MINUTES=$${CHAOS_MINUTES:-4} CHAOS_FAULT_EVERY=$${CHAOS_FAULT_EVERY:-25} \
	  CHAOS_PITR_POINTS=$${CHAOS_PITR_POINTS:-2} CHAOS_SEED=$${CHAOS_SEED:-20261203} $(MAKE) --no-print-directory chaos

# The planted product bugs of issue 39 (tests/chaos/plant.py), one short run each: each run must
# fail (the checker caught the bug); its log says after how long.
chaos-planted:
	@for bug in $${CHAOS_PLANTS:-retention shipping manifest}; do \
	  if CHAOS_PLANT=$$bug CHAOS_MINUTES=$${CHAOS_MINUTES:-5} $(MAKE) --no-print-directory chaos; then \
	    echo "chaos-planted: the planted $$bug bug was not caught"; exit 1; fi; \
	done

unit: setup
	$(VENV)/bin/pytest -q tests/unit

demo: demo-deps $(DEMO_STAMP)
	@$(PY) -m compileall -q provider dags scripts > /dev/null
	$(PY) scripts/demo.py

bench: setup
	$(PY) bench/backup_throughput.py

lock:
	$(VENV)/bin/uv pip compile -q --python-version 3.11.2 --extra test --extra docs --extra demo \
		pyproject.toml -o constraints.txt

clean:
	rm -rf $(VENV) $(AF31) $(AF32) site .pytest_cache .mypy_cache .ruff_cache
