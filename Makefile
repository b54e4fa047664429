# Two commands for a newcomer: `make demo` and `make test`. Both create the
# virtualenv on first use; nothing needs to be installed by hand.

# A Python >= 3.12 (Django 6 needs it), 3.12 first: the embedded PostgreSQL
# (pgserver) ships wheels up to 3.12. Looks on PATH, then in pyenv.
PYENV_PYTHONS = $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3
PYTHON ?= $(shell for p in python3.12 $(subst 3.1[2-9]*,3.12*,$(PYENV_PYTHONS)) python3.13 python3.14 python3 \
	$(PYENV_PYTHONS); do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Django 5.2 on Python 3.11, where django.tasks does not exist: `make test-django52`.
PYTHON311 ?= $(shell for p in python3.11 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.11*/bin/python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
VENV52 ?= .venv-django52
STAMP52 := $(VENV52)/.installed

# Release checks (`make release-check`): build and twine in a virtualenv of their own.
RELEASE_VENV ?= .venv-release
RELEASE_STAMP := $(RELEASE_VENV)/.installed
# Python 3.13 (no pgserver wheel for it) joins the release check when DATABASE_URL is set.
PYTHON313 ?= $(shell for p in python3.13 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.13*/bin/python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

DOCS_STAMP := $(VENV)/.installed-docs
LINT_STAMP := $(VENV)/.installed-lint

.PHONY: help demo bench test test-naive-time test-chaos test-upgrade test-django52 lint lint-migrations serve format clean release-check docs
.DEFAULT_GOAL := help

help:
	@echo "make demo   run the demo workflows and print a report"
	@echo "make test   run the test suite (in TEST_WORKERS=3 processes, then the serial tests in one)"
	@echo "make test-naive-time   the tests marked moments again with USE_TZ = False (CI runs it)"
	@echo "make test-chaos   the chaos run: killed workers and a restarted PostgreSQL (CI runs it)"
	@echo "make test-upgrade   a rolling upgrade from the previous release under load (CI runs it)"
	@echo "make test-django52   the suite on Django 5.2 with Python 3.11 (Tasks backend tests skip)"
	@echo "make bench   the benchmark (docs/performance.md; BENCH_ARGS=\"--only one_step,limit_1 --repeat 4\")"
	@echo "make lint   ruff and mypy;  make serve: the admin on http://127.0.0.1:8000/admin/"
	@echo "make lint-migrations   squawk on the SQL of the migrations since the last release (.ci/migration-lint.toml)"
	@echo "make release-check   build the sdist and wheel, twine check, install the wheel on Django 6 and 5.2"
	@echo "make docs   the documentation site into build/site (MkDocs, warnings as errors)"

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "No Python >= 3.12 found; set PYTHON=/path/to/python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python manage.py migrate --verbosity 0
	$(BIN)/python manage.py run_demo

# The benchmark harness is the repository's (project/benchmark), not the package's.
bench: $(STAMP)
	$(BIN)/python manage.py benchmark $(BENCH_ARGS)

# The chaos run (killed workers and a restarted PostgreSQL of its own, about
# 25 s) and the rolling upgrade (the previous release installed from git history
# into .previous-release/, then two upgrades under load: a few minutes) are apart,
# so that one `make test` stays short: `make test-chaos`, `make test-upgrade`, and CI.
# `make test` runs the suite in TEST_WORKERS processes (pytest-xdist), each on a
# test database of its own: most of its time is spent waiting on worker
# subprocesses, so three overlap well even on two cores. Then, in one process,
# the tests marked serial: those bound to a wall-clock duration or that read a
# query plan, which a loaded machine would fail. Both parts always run; it fails
# if either does: about 4.5 minutes on two cores (the serial part under one),
# 13 to 16 with other runs loading them (load 10 or more), where one process takes 18.
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 3
SUITE = not chaos and not upgrade

# $(call suite,python): the suite, in parallel then serial, as described above.
define suite
$(if $(filter-out 0,$(TEST_WORKERS)),\
	status=0; \
	$(1) -m pytest -m "$(SUITE) and not serial" -n $(TEST_WORKERS) --dist loadgroup || status=$$?; \
	$(1) -m pytest -m "$(SUITE) and serial" || status=$$?; \
	exit $$status,\
	$(1) -m pytest -m "$(SUITE)")
endef

test: $(STAMP)
	$(call suite,$(BIN)/python)

# The tests that involve moments again, in a project without time zones (USE_TZ = False).
test-naive-time: $(STAMP)
	$(BIN)/python -m pytest -m "moments and not chaos and not upgrade" --ds=tests.naive_time_settings

test-chaos: $(STAMP)
	$(BIN)/python -m pytest -m chaos

test-upgrade: $(STAMP)
	$(BIN)/python -m pytest -m upgrade

$(STAMP52): requirements.txt pyproject.toml
	@test -n "$(PYTHON311)" || { echo "No Python 3.11 found; set PYTHON311=/path/to/python3.11"; exit 1; }
	$(PYTHON311) -m venv $(VENV52)
	$(VENV52)/bin/python -m pip install --quiet --upgrade pip
	$(VENV52)/bin/python -m pip install --quiet -r requirements.txt -e .
	@touch $(STAMP52)

test-django52: $(STAMP52)
	$(VENV52)/bin/python -c 'import django; assert django.VERSION[:2] == (5, 2), django.get_version()'
	$(call suite,$(VENV52)/bin/python)

# The site's tools (requirements-docs.txt) go into the project's .venv: the
# reference is read from the app's code, which needs Django beside them.
$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(BIN)/python -m pip install --quiet -r requirements-docs.txt
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "Open build/site/index.html in a browser (its search needs it served: $(BIN)/python -m http.server -d build/site)"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy orchestration project/benchmark project/demo/management

# The migrations' linter (requirements-lint.txt) goes into the project's .venv:
# it reads the SQL that sqlmigrate prints, which needs the app beside it.
$(LINT_STAMP): requirements-lint.txt $(STAMP)
	$(BIN)/python -m pip install --quiet -r requirements-lint.txt
	@touch $(LINT_STAMP)

lint-migrations: $(LINT_STAMP)
	$(BIN)/python .ci/lint_migrations.py

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

$(RELEASE_STAMP): requirements-release.txt
	@test -n "$(PYTHON)" || { echo "No Python >= 3.12 found; set PYTHON=/path/to/python3.12"; exit 1; }
	$(PYTHON) -m venv $(RELEASE_VENV)
	$(RELEASE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RELEASE_VENV)/bin/python -m pip install --quiet -r requirements-release.txt
	@touch $(RELEASE_STAMP)

# The sdist and the wheel as a release builds them, twine check, then the wheel
# (not editable) in fresh virtualenvs: Django 6 on Python >= 3.12, Django 5.2 on
# 3.11 (and Django 6 on 3.13 with DATABASE_URL), each running manage.py check
# and migrate in a throwaway project (.ci/release_check.py).
release-check: $(RELEASE_STAMP)
	@test -n "$(PYTHON311)" || { echo "No Python 3.11 found; set PYTHON311=/path/to/python3.11"; exit 1; }
	$(RELEASE_VENV)/bin/python .ci/release_check.py $(PYTHON):6 $(PYTHON311):5.2 \
		$(if $(and $(DATABASE_URL),$(PYTHON313)),$(PYTHON313):6)

# The admin, with a worker process beside it so that what you retry there runs;
# DEBUG on (runserver then serves the admin's static files) unless DEBUG is set.
serve: $(STAMP)
	$(BIN)/python manage.py migrate --verbosity 0
	@echo "Admin: http://127.0.0.1:8000/admin/ (user demo, password demo, made by make demo). Workers run alongside; Ctrl-C stops both."
	@$(BIN)/python manage.py runworkers --concurrency 2 & workers=$$!; \
	trap 'kill -TERM $$workers 2>/dev/null; wait $$workers' EXIT INT TERM; \
	DEBUG=$${DEBUG-on} $(BIN)/python manage.py runserver 127.0.0.1:8000

clean:
	rm -rf $(VENV) $(VENV52) $(RELEASE_VENV) .previous-release .pgdata .pytest_cache .mypy_cache .ruff_cache *.egg-info
