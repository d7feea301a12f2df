#!/usr/bin/env bash
# The docs site (make docs-test): antsibull-docs' linter on the collection's docs (module docs,
# extra docs and the references in them; references to other collections are left to the site
# build, where Sphinx fails on any it cannot resolve), the site build (docs/build.sh: warnings are errors), and a browser test
# (tests/ansible/docs-site/check.mjs: headless Chromium from Debian's packages, driven by
# playwright-core from npm) over the built site served on loopback.
# Needs `make venv collection`, /usr/bin/chromium and node (.ci/run
# installs chromium; `make docs-test` the rest).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
out=$root/.work/docs
node_dir=$root/.work/docs-node
passed=0

antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs --validate-collection-refs self \
  --disallow-unknown-collection-refs "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/sankofa/proxmox"
echo "ok: antsibull-docs lint-collection-docs"
passed=$((passed + 1))

docs/build.sh
passed=$((passed + 1))

modules=()
for doc in plugins/modules/*.yml; do modules+=("sankofa.proxmox.$(basename "$doc" .yml)"); done
ansible-doc -t module --json "${modules[@]}" > "$out/ansible-doc.json"
guides=$(python3 -c 'import sys, yaml
print(",".join(g for s in yaml.safe_load(open(sys.argv[1]))["sections"] for g in s["toctree"]))' docs/docsite/extra-docs.yml)

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$out/html" "$port" > "$out/http.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/index.html" > /dev/null && break; sleep 0.1; done
DOCS_NODE_DIR="$node_dir" node tests/ansible/docs-site/check.mjs "http://127.0.0.1:$port/" "$out" \
  "$out/ansible-doc.json" "$guides" | tee "$out/browser.log"
echo "docs-site: $((passed + $(grep -c '^ok:' "$out/browser.log"))) passed, 0 failed"
