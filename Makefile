# office — the two commands a user needs are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
PG_CONFIG   ?= /usr/lib/postgresql/15/bin/pg_config
# Debian packages the tests need: the PostgreSQL 15 server, and the client
# package, which also ships PGXS and pg_isolation_regress; the server's headers,
# for the native helpers (sql/native/; installing them upgrades the server to
# their version, so `make test` runs deps before it starts any cluster); pg_cron
# for the tested pg_cron example of docs/operations.md; PL/Proxy for the
# scale-out tests; chromium and its driver for the dashboard's browser test;
# clang-format for the style check of sql/native/.
DEB_PACKAGES := postgresql-15 postgresql-client-15 postgresql-server-dev-15 postgresql-15-cron \
                postgresql-15-plproxy chromium chromium-driver clang-format

.PHONY: help deps venv install demo test test-unit test-fast verify generate lint typecheck format format-check bump bench clean

help:
	@echo "make demo   run the product on the embedded PostgreSQL"
	@echo "make test   everything CI runs: the unit tier, both PostgreSQL versions, ruff, mypy"
	@echo "make test-unit  the unit tier alone (tests/unit: seconds, no PostgreSQL needed)"
	@echo "make install  install the extension into PG_CONFIG's PostgreSQL (PGXS)"
	@echo "make verify   fail, with a diff, when a committed generated file is stale"
	@echo "make generate rewrite the committed generated files (docs/reference.md, the proxy script)"
	@echo "make format   rewrite sql/native/ in its style (make format-check: fail where it differs)"
	@echo "make bump VERSION=x.y.z  freeze the current version and start x.y.z (tools/bump.py)"
	@echo "make bench  benchmarks (durable cluster), results in docs/benchmarks.md"

# apt-get only when something is missing, so a warm machine does not touch the
# network; `apt-get update` once before the install, as a fresh machine needs.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:" $$missing; \
	    if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install $$missing" >&2; exit 1; fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,ui]' 2>&1 | { grep -v "is ignored" || true; }; \
	    test $${PIPESTATUS[0]} -eq 0
	$(BIN)/python -c "import controlplane, psycopg, asyncpg, yoyo, pytest_postgresql, starlette, jinja2, uvicorn"
	touch $@

install:
	$(MAKE) -C sql install PG_CONFIG=$(PG_CONFIG)
	$(MAKE) -C sql/proxy install PG_CONFIG=$(PG_CONFIG)

demo: venv
	$(BIN)/officectl demo

test: deps venv
	bash tests/run_suite.sh

# tests/unit needs no server (its conftest refuses the database fixtures);
# `make test` runs it first, on its own, before starting any cluster.
test-unit: venv
	$(BIN)/pytest -p no:cacheprovider -q tests/unit

# The committed generated files (tools/generated.py lists them) against their
# generators, on the server of OFFICE_DSN (else the embedded database).
# `make test` runs this on its PostgreSQL 15 before the suites.
verify: venv
	$(BIN)/python -m tools.generated verify

generate: venv
	$(BIN)/python -m tools.generated write

lint: venv
	$(BIN)/ruff check controlplane tests bench tools
	$(BIN)/ruff format --check controlplane tests bench tools

typecheck: venv
	$(BIN)/mypy --strict controlplane tools tests bench

# The C of sql/native/ in its style (sql/native/.clang-format); the generated
# constants.h is `make verify`'s.
NATIVE_SOURCES = $(filter-out sql/native/constants.h,$(wildcard sql/native/*.c sql/native/*.h))
format:
	clang-format -i $(NATIVE_SOURCES)

format-check:
	clang-format --dry-run --Werror $(NATIVE_SOURCES)

# Freeze the current version into sql/released/ and start VERSION
# (tools/bump.py says what it writes; it writes nothing when it refuses).
bump: venv
	@test -n "$(VERSION)" || { echo "usage: make bump VERSION=x.y.z" >&2; exit 2; }
	$(BIN)/python -m tools.bump "$(VERSION)"

# The peers of bench/peers.py (the bench extra) are installed here only: the
# suite does not import bench/, and they bring a dozen packages of their own.
bench: deps venv
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench]' 2>&1 | { grep -v "is ignored" || true; }; \
	    test $${PIPESTATUS[0]} -eq 0
	bash bench/run.sh

clean:
	$(MAKE) -C sql clean PG_CONFIG=$(PG_CONFIG)
	rm -rf .pytest_cache .mypy_cache .ruff_cache tests/isolation/output
