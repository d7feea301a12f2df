#!/usr/bin/env bash
# The user-data of the nocloud tests and docs, checked by a real parser (make cloud-init-schema):
# Debian's cloud-init (`cloud-init schema --config-file`, package cloud-init; .ci/run installs
# it) on every #cloud-config part in tests/nocloud/, in the vm module's EXAMPLES
# (plugins/modules/vm.yml) and in the guide's YAML blocks
# (docs/docsite/rst/guide_cloudinit_nocloud.rst). A dict part is checked as the module writes
# it: `#cloud-config` and its YAML.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
command -v cloud-init >/dev/null || { echo "cloud-init is missing: apt-get install cloud-init" >&2; exit 1; }
out=$root/.work/cloud-init-schema
rm -rf "$out" && mkdir -p "$out"
cp tests/nocloud/*.yaml "$out/"
python3 - "$out" <<'PY'
import re, sys, yaml
out = sys.argv[1]
found = []

def walk(value, where):
    if isinstance(value, dict):
        cloud = value.get("nocloud")
        if isinstance(cloud, dict):
            for key in ("user_data", "vendor_data"):
                part = cloud.get(key)
                if isinstance(part, dict):
                    part = "#cloud-config\n" + yaml.safe_dump(part, sort_keys=False)
                if isinstance(part, str) and part.startswith("#cloud-config"):
                    found.append((f"{where}-{key}", part))
        for item in value.values():
            walk(item, where)
    elif isinstance(value, list):
        for item in value:
            walk(item, where)

docs = yaml.safe_load(open("plugins/modules/vm.yml"))
walk(yaml.safe_load(docs["EXAMPLES"]), "vm-examples")
guide = open("docs/docsite/rst/guide_cloudinit_nocloud.rst").read()
blocks = re.findall(r"^\.\. code:: yaml\n\n((?:   .*\n|\n)+)", guide, re.M)
for i, block in enumerate(blocks):
    text = "\n".join(line[3:] for line in block.splitlines())
    walk(yaml.safe_load(text), f"guide-block{i}")
if len(found) < 3:
    sys.exit(f"expected the user-data of the vm EXAMPLES and of the guide, found {len(found)}")
for n, (name, part) in enumerate(found):
    with open(f"{out}/{n:02d}-{name}.yaml", "w") as f:
        f.write(part)
PY
passed=0
for file in "$out"/*.yaml; do
  if ! cloud-init schema --config-file "$file" > "$file.log" 2>&1; then
    echo "FAILED: cloud-init schema --config-file $file" >&2
    cat "$file.log" >&2
    exit 1
  fi
  echo "ok: $(basename "$file")"
  passed=$((passed + 1))
done
echo "cloud-init-schema: $passed passed, 0 failed"
