# sankofa.proxmox — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
ROOT := $(abspath .)
WORK := $(ROOT)/.work
VENV := $(ROOT)/.venv
BIN := $(VENV)/bin
# Ansible must use the code in this checkout, never a stale installed copy.
export ANSIBLE_HOME := $(WORK)/ansible-home
export ANSIBLE_COLLECTIONS_PATH := $(WORK)/collections
export ANSIBLE_LOCAL_TEMP := $(WORK)/ansible-tmp
export ANSIBLE_REMOTE_TEMP := $(WORK)/ansible-remote-tmp
export ANSIBLE_NOCOLOR := 1
export PATH := $(BIN):$(PATH)
# `make demo PYTHON=/path/to/python3.12` picks the interpreter for the venv.
export PYTHON

.PHONY: all build binaries venv collection demo docs docs-test test fmt-check clippy cargo-test versions cloud-init-schema lint sanity playbooks platforms molecule oldest-ansible galaxy-smoke awx-job changelog ee dist bench bench-full oracle-diff clean

all: build

## The modules are binaries, one per platform, in plugins/bin/<platform>/ (the action plugins run the one
## for the host a task runs on). <platform> is `uname -s`-`uname -m` in lower case, arm64 spelled
## aarch64: linux-x86_64, linux-aarch64, darwin-x86_64, darwin-aarch64.
MODULES := vm image snapshot vm_info
HOST_PLATFORM := $(shell uname -s | tr '[:upper:]' '[:lower:]')-$(shell uname -m | sed 's/^arm64$$/aarch64/')

## build: compile the modules and the simulator (release) and place the modules in plugins/bin/<this platform>/
build:
	cargo build --release --workspace --locked
	rm -f $(addprefix plugins/modules/,$(MODULES))  # where the binaries lived before plugins/bin/
	mkdir -p plugins/bin/$(HOST_PLATFORM)
	for m in $(MODULES); do install -m 0755 target/release/$$m plugins/bin/$(HOST_PLATFORM)/$$m; done

## venv: a local Python environment with the pinned ansible-core, ansible-lint, molecule and
## antsibull tools
venv: $(VENV)/.installed
$(VENV)/.installed: tests/ansible/requirements.txt
	py=$$(tests/ansible/find-python.sh) && "$$py" -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r tests/ansible/requirements.txt
	touch $@

## dist: the collection users install, build/sankofa-proxmox-<version>.tar.gz, with the
## binaries `make binaries` builds plus any already in plugins/bin/ (the release workflow,
## .github/workflows/release.yml, puts the other platforms' there before it packs).
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
dist: venv binaries
	mkdir -p build
	ansible-galaxy collection build --force --output-path build .
	@echo "dist: build/sankofa-proxmox-$(VERSION).tar.gz with binaries for: $$(ls plugins/bin | tr '\n' ' ')"

## binaries: release binaries in plugins/bin/<platform>/ for every platform of DIST_PLATFORMS
## whose Rust standard library this toolchain has (on this project's machines: linux-x86_64
## only; it says which it skips). Linux binaries need at most glibc 2.17 (cargo-zigbuild with
## Zig from PyPI as the linker, fetched into .work/dist-tools on first use); macOS ones are
## linked by Apple's linker, so they build on a Mac. One platform:
## `make binaries DIST_PLATFORMS=linux-aarch64=aarch64-unknown-linux-gnu.2.17`.
DIST_TOOLS := $(WORK)/dist-tools
ZIGBUILD_VERSION := 0.24.1
# <platform>=<cargo target>; a .2.17 suffix is the glibc cargo-zigbuild links against.
DIST_PLATFORMS := linux-x86_64=x86_64-unknown-linux-gnu.2.17 linux-aarch64=aarch64-unknown-linux-gnu.2.17 \
  darwin-x86_64=x86_64-apple-darwin darwin-aarch64=aarch64-apple-darwin
binaries:
	rm -f $(addprefix plugins/modules/,$(MODULES))
	libdir=$$(rustc --print sysroot)/lib/rustlib; \
	for entry in $(DIST_PLATFORMS); do \
	  platform=$${entry%%=*}; target=$${entry#*=}; triple=$${target%.2.17}; \
	  if [ ! -d "$$libdir/$$triple/lib" ]; then \
	    echo "binaries: not building $$platform: this toolchain has no $$triple standard library"; continue; \
	  fi; \
	  case $$target in \
	    *.2.17) $(MAKE) --no-print-directory $(DIST_TOOLS)/.installed; build=zigbuild;; \
	    *) build=build;; \
	  esac; \
	  PATH="$(DIST_TOOLS)/bin:$(DIST_TOOLS)/venv/bin:$$PATH" cargo $$build --release --locked \
	    -p sankofa-proxmox --target $$target --target-dir target/dist; \
	  mkdir -p plugins/bin/$$platform; \
	  for m in $(MODULES); do install -m 0755 target/dist/$$triple/release/$$m plugins/bin/$$platform/$$m; done; \
	  echo "binaries: built $$platform ($$target)"; \
	done
$(DIST_TOOLS)/.installed: tests/ansible/requirements-dist.txt
	mkdir -p $(DIST_TOOLS)
	python3 -m venv $(DIST_TOOLS)/venv
	$(DIST_TOOLS)/venv/bin/pip install --quiet --disable-pip-version-check -r tests/ansible/requirements-dist.txt
	cargo install --quiet --locked cargo-zigbuild --version $(ZIGBUILD_VERSION) --root $(DIST_TOOLS)
	touch $@

## collection: make this checkout importable as sankofa.proxmox
collection:
	mkdir -p $(WORK)/collections/ansible_collections/sankofa $(ANSIBLE_HOME) $(ANSIBLE_LOCAL_TEMP)
	ln -sfn $(ROOT) $(WORK)/collections/ansible_collections/sankofa/proxmox

## demo: create VM 100 from a cloud image on pve-sim, run it again (changed=0), stop pve-sim
demo: build venv collection
	tests/ansible/demo.sh

## docs: the docs site, .work/docs/html/index.html (antsibull-docs and Sphinx from the venv)
DOCS_NODE := $(WORK)/docs-node
PLAYWRIGHT_VERSION := 1.65.1
$(DOCS_NODE)/.installed-$(PLAYWRIGHT_VERSION):
	mkdir -p $(DOCS_NODE)
	cd $(DOCS_NODE) && npm install --silent --no-save --no-package-lock --no-audit --no-fund playwright-core@$(PLAYWRIGHT_VERSION)
	touch $@
docs: venv collection
	docs/build.sh

## docs-test: antsibull-docs' linter, the site build, and the site in headless Chromium
## (playwright-core from npm in .work/docs-node drives Debian's /usr/bin/chromium)
docs-test: venv collection $(DOCS_NODE)/.installed-$(PLAYWRIGHT_VERSION)
	tests/ansible/docs-site.sh

## test: everything: format, lint, unit and integration tests, sanity, molecule, a galaxy install
test: fmt-check clippy build venv collection cargo-test cloud-init-schema lint changelog sanity docs-test playbooks platforms molecule oldest-ansible galaxy-smoke awx-job ee
	@echo "make test: all suites passed"

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets --locked -- -D warnings

cargo-test:
	cargo build --workspace --locked
	cargo test --workspace --locked

## versions: the version matrix alone (part of cargo-test): the demo, clone and HA scenarios at
## PVE 8.0, 8.4 and 9.1, and pve-sim's version table through its API
versions:
	cargo test -p sankofa-proxmox --locked --test integration versions::
	cargo test -p pve-sim --locked --test integration versions::

## cloud-init-schema: the nocloud user-data of the tests and docs, checked by Debian's cloud-init
cloud-init-schema:
	tests/ansible/cloud_init_schema.sh

lint: venv collection
	ansible-lint --offline playbooks/ molecule/

sanity: build venv
	tests/ansible/sanity.sh

playbooks: build venv collection
	tests/ansible/playbooks.sh

## platforms: the action plugins run the binary of the host's platform, or fail naming it
platforms: build venv collection
	tests/ansible/platforms.sh

molecule: build venv collection
	rm -rf $(ANSIBLE_HOME)/tmp/molecule.*  # a previous run's state would skip `prepare`
	CI=true molecule test --all < /dev/null

## oldest-ansible: the playbooks, molecule default and sanity again on ansible-core 2.16, the
## oldest version meta/runtime.yml claims (its own venv, Python 3.10-3.12)
OLD_VENV := $(WORK)/venv-ansible-2.16
$(OLD_VENV)/.installed: tests/ansible/requirements-2.16.txt
	py=$$(tests/ansible/find-python.sh 3.10 3.12) && "$$py" -m venv $(OLD_VENV)
	$(OLD_VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/ansible/requirements-2.16.txt
	touch $@
oldest-ansible: build collection $(OLD_VENV)/.installed
	ANSIBLE_VENV=$(OLD_VENV) tests/ansible/playbooks.sh
	ANSIBLE_VENV=$(OLD_VENV) tests/ansible/platforms.sh
	rm -rf $(ANSIBLE_HOME)/tmp/molecule.*
	PATH="$(OLD_VENV)/bin:$$PATH" CI=true molecule test -s default < /dev/null
	ANSIBLE_VENV=$(OLD_VENV) tests/ansible/sanity.sh
	@echo "oldest-ansible: ansible-core $$($(OLD_VENV)/bin/python -c 'import ansible; print(ansible.__version__)') passed"

galaxy-smoke: dist
	tests/ansible/galaxy-smoke.sh build/sankofa-proxmox-$(VERSION).tar.gz

## awx-job: playbooks/demo.yml twice as AWX / Automation Controller run a job (ansible-runner on a
## private data dir, the collection installed from the tarball), checking the jobs' events
awx-job: build dist
	tests/ansible/awx-job.sh build/sankofa-proxmox-$(VERSION).tar.gz

## changelog: antsibull-changelog lint, and CHANGELOG.md generated from changelogs/
changelog: venv
	tests/ansible/changelog.sh

## ee: the execution-environment metadata, through ansible-builder introspect and create
ee: dist
	tests/ansible/ee.sh build/sankofa-proxmox-$(VERSION).tar.gz

## bench: benchmarks against community.proxmox on the same pve-sim (bench/results/latest.md
## and PNG plots beside it; about 20 minutes)
bench: build venv
	bench/run.sh

## bench-full: also 2- and 5-minute tasks and imports (about 50 minutes)
bench-full: build venv
	bench/run.sh --full

## oracle-diff: pve-sim against PVE's own code (tests/oracle/scenarios.json sent to pve-sim and to
## the PVE oracle in ../shared/pve-oracle; a development tool, not part of `make test`; it says
## so and stops where the oracle is not installed)
oracle-diff:
	@if [ ! -x ../shared/pve-oracle/run.sh ]; then echo "oracle-diff: skipped - the PVE oracle is not installed at ../shared/pve-oracle"; exit 0; fi
	cargo build -p pve-sim --locked
	python3 tests/oracle/diff.py --oracle ../shared/pve-oracle --sim target/debug/pve-sim

clean:
	rm -rf $(WORK) target plugins/bin $(addprefix plugins/modules/,$(MODULES)) build
