#!/usr/bin/env bash
# The changelog as Ansible collections keep it: changelogs/changelog.yaml and its fragments
# pass `antsibull-changelog lint`, and CHANGELOG.md is what `antsibull-changelog generate`
# makes of them (add a fragment under changelogs/fragments/ for every change; see README).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ansible/env.sh
antsibull-changelog lint
antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
before=$(mktemp)
trap 'rm -f "$before"' EXIT
cp CHANGELOG.md "$before"
antsibull-changelog generate > /dev/null
if ! cmp -s "$before" CHANGELOG.md; then
  diff "$before" CHANGELOG.md || true
  cp "$before" CHANGELOG.md
  echo "CHANGELOG.md is not generated from changelogs/ (run antsibull-changelog generate)" >&2
  exit 1
fi
echo "changelog: 1 passed, 0 failed"
