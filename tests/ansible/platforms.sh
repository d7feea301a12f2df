#!/usr/bin/env bash
# The platform dispatch of the action plugins (plugins/plugin_utils/binary_module.py): the vm
# module runs the binary built for the host a task runs on, or fails with a message naming
# that host's platform.
#  - a local connection on a controller whose platform has no binary (a copy of the
#    collection without plugins/bin/<this platform>/): the message names it, and no uname is sent;
#  - hosts that answer `uname -sm` as a Mac, an ARM Linux and this machine would, and one
#    without uname (tests/ansible/platforms/, a test connection): one uname each, the binary runs on
#    the one whose platform has a binary, the others fail naming theirs;
#  - a host whose cached facts say Darwin arm64, and one whose facts were gathered: no uname;
#  - the same hosts through delegate_to.
# Needs `make build venv collection`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
dir=$PWD/.work/platforms
rm -rf "$dir" && mkdir -p "$dir"
platform=$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m | sed 's/^arm64$/aarch64/')
[ -x "plugins/bin/$platform/vm" ] || { echo "plugins/bin/$platform/vm is missing: run make build first" >&2; exit 1; }
passed=0

ansible-galaxy collection install --force . -p "$dir/nobinary" > /dev/null 2>&1
rm -rf "$dir/nobinary/ansible_collections/sankofa/proxmox/plugins/bin/$platform"
if out=$(ANSIBLE_COLLECTIONS_PATH="$dir/nobinary" ansible localhost -m sankofa.proxmox.vm \
  -a 'api_host=127.0.0.1 vmid=100' -vvv 2>&1); then
  echo "$out"; echo "the vm module ran without a binary for $platform" >&2; exit 1
fi
want="sankofa.proxmox.vm has no binary for $platform, the platform of localhost (a local connection: this controller)"
grep -qF "$want" <<< "$out" || { echo "$out"; echo "no message naming $platform" >&2; exit 1; }
grep -q "uname" <<< "$out" && { echo "$out"; echo "a local connection sent uname" >&2; exit 1; }
echo "ok: no binary for the controller's platform: $want"
passed=$((passed + 1))

FAKE_UNAME_LOG="$dir/commands.log" ansible-playbook -i tests/ansible/platforms/inventory.yml tests/ansible/platforms/platforms.yml \
  -e controller_platform="$platform" > "$dir/platforms.log" 2>&1 \
  || { cat "$dir/platforms.log"; echo "the platform playbook failed" >&2; exit 1; }
grep -Eq '^localhost +:.* failed=0 ' "$dir/platforms.log" || { cat "$dir/platforms.log"; exit 1; }
# One uname per task a host ran (mac twice: its own play and the delegated task), none where
# the facts were known, and the binary ran on the host of this platform.
for expected in mac=2 armlinux=1 native=1 nouname=1 cachedmac=0 gathered=0; do
  host=${expected%=*}
  calls=$(grep -c "^$host .*uname -sm" "$dir/commands.log" || true)
  [ "$calls" = "${expected#*=}" ] || { cat "$dir/commands.log"; echo "$host: $calls uname calls, expected ${expected#*=}" >&2; exit 1; }
  echo "ok: $host: $calls uname call(s)"
  passed=$((passed + 1))
done
for host in native gathered; do
  grep -q "^$host .*AnsiballZ_vm" "$dir/commands.log" || { cat "$dir/commands.log"; echo "the binary did not run on $host" >&2; exit 1; }
done
grep -q "^mac .*AnsiballZ_vm" "$dir/commands.log" && { echo "a binary was sent to mac" >&2; exit 1; }
passed=$((passed + 1))
# The platforms `make binaries` knows, the release workflow builds, packs and smoke-tests, the
# platforms guide and the README's table list are the same.
python3 - <<'PY'
import re
import sys
import yaml
make = open('Makefile', encoding='utf-8').read()
listed = re.search(r'^DIST_PLATFORMS := ((?:.*\\\n)*.*)$', make, re.M).group(1).replace('\\\n', ' ')
platforms = dict(entry.split('=') for entry in listed.split())
jobs = yaml.safe_load(open('.github/workflows/release.yml', encoding='utf-8'))['jobs']
built = {item['platform']: item['target'] for item in jobs['binaries']['strategy']['matrix']['include']}
runners = sorted(item['runner'] for item in jobs['binaries']['strategy']['matrix']['include'])
packed = next(step['run'] for step in jobs['collection']['steps'] if 'Every platform' in step.get('name', ''))
guide = open('docs/docsite/rst/guide_platforms.rst', encoding='utf-8').read()
errors = []
if built != platforms:
    errors.append('the release workflow builds %s, make binaries knows %s' % (built, platforms))
if sorted(jobs['smoke']['strategy']['matrix']['runner']) != runners:
    errors.append('the smoke runners are not the build runners %s' % runners)
errors += ['the workflow does not pack %s' % p for p in platforms if p not in packed]
errors += ['the platforms guide does not list %s' % p for p in platforms if '``%s``' % p not in guide]
readme = open('README.md', encoding='utf-8').read()
errors += ["the README's platform table does not list %s" % p for p in platforms if '| `%s` |' % p not in readme]
if errors:
    sys.exit('\n'.join(errors))
print('ok: make binaries, the release workflow, the platforms guide and the README name the same %d platforms' % len(platforms))
PY
passed=$((passed + 1))
echo "platforms: $passed passed, 0 failed"
