#!/usr/bin/env bash
# Builds the docs site into .work/docs/html (make docs): antsibull-docs writes the RST of the
# collection (a page per module from its sidecar docs, plugins/modules/*.yml, and the guides
# of docs/docsite/), and Sphinx renders it with the Ansible theme, warnings as errors. Offline:
# the links into Ansible's own docs resolve through a local inventory (docs/site/conf.py).
# Needs `make venv collection` (`make docs` runs both).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ansible/env.sh
out=$root/.work/docs
rm -rf "$out" && mkdir -p "$out" && mkdir -m 0700 "$out/rst"
antsibull-docs --config-file docs/site/antsibull-docs.cfg collection --use-current --squash-hierarchy \
  --dest-dir "$out/rst" sankofa.proxmox > "$out/antsibull-docs.log" 2>&1 \
  || { cat "$out/antsibull-docs.log"; exit 1; }
export SANKOFA_DOCS_INVENTORY="$out/ansible_devel.inv"
python3 - docs/site/ansible-devel-labels.txt "$SANKOFA_DOCS_INVENTORY" <<'PY'
import sys, zlib
labels, inventory = sys.argv[1:3]
lines = []
for line in open(labels, encoding='utf-8'):
    if line.strip() and not line.startswith('#'):
        name, uri, title = line.rstrip('\n').split('\t')
        # `envvar:NAME` rows are environment variables (Sphinx's std:envvar), the rest labels.
        kind = 'std:label'
        if name.startswith('envvar:'):
            kind, name = 'std:envvar', name[len('envvar:'):]
        lines.append('%s %s -1 %s %s\n' % (name, kind, uri, title))
with open(inventory, 'wb') as out:
    out.write(b'# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n'
              b'# The remainder of this file is compressed using zlib.\n')
    out.write(zlib.compress(''.join(lines).encode()))
PY
sphinx-build -b html -c docs/site -W --keep-going -q "$out/rst" "$out/html" 2>&1 | tee "$out/sphinx.log"
echo "docs: $out/html/index.html"
