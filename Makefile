# The two commands a newcomer types are `make run` and `make test`; both install what they need.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
VAR ?= $(or $(SWITCHYARD_VAR_DIR),$(CURDIR)/var)
TEST_VAR := $(CURDIR)/var/test

.PHONY: run run-slurm test screenshots install system-deps browser-deps lint typecheck bench simulation-report live-day slurm-up slurm-down registry-up registry-down clean

$(VENV)/.installed: pyproject.toml clients/pyproject.toml
	@# python-ldap builds from source against OpenLDAP's and SASL's headers (docs/security.md).
	@dpkg -s libldap2-dev libsasl2-dev python3-dev gcc >/dev/null 2>&1 || bash docker/install-packages.sh libldap2-dev libsasl2-dev python3-dev gcc
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	$(VENV)/bin/pip install -q -e ./clients  # the command line, a package of its own
	touch $@

install: $(VENV)/.installed $(VAR)/secret-key

# bubblewrap sandboxes every job; jobs run as unprivileged accounts, never root
# (docs/security.md). The fault tests start, kill and restart a Redis and a PostgreSQL of
# their own (tests/servers.py).
system-deps:
	@command -v bwrap >/dev/null || bash docker/install-packages.sh bubblewrap
	@# A batch job's network: slirp4netns, and iproute2's ip for its routes (docs/security.md).
	@command -v slirp4netns >/dev/null && test -x /usr/bin/ip -o -x /bin/ip || bash docker/install-packages.sh slirp4netns iproute2
	@# A live sandbox's egress allow-list: Debian's tinyproxy, one per session started by the
	@# backend as the job's account; the package's own service is never started, and is kept
	@# stopped and disabled where it was (docs/sandbox-network.md).
	@test -x /usr/bin/tinyproxy || bash docker/install-packages.sh tinyproxy
	@bash docker/tinyproxy-service-off.sh
	@# A task in an image: skopeo pulls it, umoci unpacks it, the static busybox sets its limits (docs/containers.md).
	@dpkg -s busybox-static >/dev/null 2>&1 && command -v skopeo >/dev/null && command -v umoci >/dev/null || bash docker/install-packages.sh busybox-static skopeo umoci
	@# slirp4netns runs as the job's account: /dev/net/tun as udev sets it (some containers have 0600).
	@test "$$(id -u)" != 0 || test ! -c /dev/net/tun || chmod 0666 /dev/net/tun
	@bash docker/job-accounts.sh switchyard-job
	@# Each local job's control group without a wait at every start (docs/security.md).
	@bash docker/cgroup-dynmods.sh
	@command -v redis-server >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| bash docker/install-packages.sh redis-server postgresql
	@# Open MPI (mpicc, and the PMIx library Slurm's mpi/pmix loads): the multi-node tests
	@# build and run an MPI program under the localhost Slurm (docs/slurm.md).
	@command -v mpicc >/dev/null || bash docker/install-packages.sh openmpi-bin libopenmpi-dev
	@# Prometheus and promtool: the metrics test scrapes a running portal with a real
	@# Prometheus, and promtool checks and unit-tests the alert rules (docs/operations.md). The
	@# package's own service is never started (docker/install-packages.sh: policy-rc.d; then disabled).
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || bash docker/install-packages.sh prometheus
	@bash docker/prometheus-service-off.sh

# A secret key per install (settings read it when DJANGO_SECRET_KEY is not set).
%/secret-key:
	@mkdir -p $(@D)
	@umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

# Debian's nginx for the front's tests (docker/nginx/switchyard.conf before gunicorn), and
# openssl for their certificate.
.PHONY: front-deps
front-deps:
	@test -x /usr/sbin/nginx -a -x /usr/bin/openssl || bash docker/install-packages.sh nginx-light openssl

# Debian's Chromium for the browser tests (Playwright's own browser download is not used).
browser-deps:
	@test -x /usr/bin/chromium || bash docker/install-packages.sh chromium

run: install system-deps
	$(PY) manage.py up

# Debian's slapd and ldap-utils for the LDAP login tests, which start a slapd of their own
# (tests/integration/test_ldap_login.py); the package's own service is never started.
.PHONY: ldap-deps
ldap-deps:
	@test -x /usr/sbin/slapd -a -x /usr/bin/ldapadd || bash docker/install-packages.sh slapd ldap-utils

# Tests keep their own var/ (broker folder, local-backend root) apart from a running `make run`.
# On TEST_WORKERS pytest-xdist workers (0: in one process): the Slurm tests, which mostly wait
# on the cluster, one after another on one of them, the rest on the others (tests/parallel.py).
# Two on two cores: a third made the run no shorter and the machine's load heavier
# (README.md, "Development").
TEST_WORKERS ?= 2
test: install system-deps browser-deps front-deps ldap-deps $(TEST_VAR)/secret-key
	@bash docker/job-accounts.sh sy-alice sy-bob
	SWITCHYARD_VAR_DIR=$(TEST_VAR) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The fast tests alone: tests/unit, without anything marked integration, browser or slurm
# (they need no worker, browser, front or cluster).
.PHONY: unit
unit: install system-deps $(TEST_VAR)/secret-key
	@bash docker/job-accounts.sh sy-alice sy-bob
	SWITCHYARD_VAR_DIR=$(TEST_VAR) $(PY) -m pytest tests/unit -m "not integration and not browser and not slurm" $(PYTEST_ARGS)

# Regenerate docs/screenshots/ from the browser tests (each role's day, the phone view).
screenshots: install system-deps browser-deps $(TEST_VAR)/secret-key
	@bash docker/job-accounts.sh sy-alice sy-bob
	SWITCHYARD_VAR_DIR=$(TEST_VAR) SWITCHYARD_UPDATE_SCREENSHOTS=1 $(PY) -m pytest tests/browser

# The Prometheus alert rules of docker/prometheus/: checked, and unit-tested one case per alert
# (docs/operations.md, "Alert rules").
.PHONY: alert-rules
alert-rules: system-deps
	cd docker/prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

# mypy with Django's and DRF's stubs over every package ([tool.mypy] in pyproject.toml).
typecheck: install
	$(VENV)/bin/mypy

bench: install system-deps
	$(PY) bench/run_all.py

# Every acceptance figure of the site's policy (validation day seeds 1-5, the SWF trace at three
# loads, the contended Alibaba run) as one table in docs/simulation.md; a few minutes on 2 cores.
simulation-report: install
	$(PY) manage.py simulate report --seeds 1-5 --write docs/simulation.md

# The validation day played through the live engine on the local backend, ten hours in six
# minutes (x0.01), judged by the same criteria beside the simulator's verdict (docs/simulation.md).
SEED ?= 1
live-day: install system-deps
	$(PY) bench/live_day.py --seed $(SEED)

# The localhost Slurm cluster, generated from the portal's model (docs/slurm.md).
slurm-up: install
	bash docker/slurm/cluster.sh start

slurm-down:
	bash docker/slurm/cluster.sh stop

# The localhost container registry and the images the project builds for it from Debian
# packages (docs/containers.md).
registry-up:
	bash docker/images/registry.sh start

registry-down:
	bash docker/images/registry.sh stop

# The portal on the localhost Slurm cluster: every pool's backend is Slurm.
run-slurm: slurm-up system-deps
	set -a; . /var/tmp/switchyard-slurm/env; set +a; \
	DATABASE_URL=$$SWITCHYARD_SLURM_PORTAL_DATABASE_URL $(PY) manage.py up --no-seed

clean:
	rm -rf var
