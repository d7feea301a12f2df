#!/usr/bin/env bash
# Starts or stops a pve-sim for the demo, the playbook tests and the molecule scenarios.
#
#   tests/ansible/sim-ctl.sh start DIR [pve-sim options…]   start it; write DIR/pve.yml (connection vars)
#   tests/ansible/sim-ctl.sh stop DIR                       stop it
#
# `start` generates a cloud-image-like qcow2 (2 GiB virtual, 64 MiB of data) and a corrupt
# one, seeds them into every node's local:import/, serves the images over HTTP on loopback
# (for download-url and the image module), and waits until the API answers.
set -euo pipefail
cmd=${1:?usage: sim-ctl.sh start|stop DIR [pve-sim options]}
dir=${2:?usage: sim-ctl.sh start|stop DIR [pve-sim options]}
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
sim=${PVE_SIM:-$root/target/release/pve-sim}

case "$cmd" in
start)
  mkdir -p "$dir/images"
  dir=$(cd "$dir" && pwd)
  img="$dir/images/noble-server-cloudimg-amd64.qcow2"
  if [ ! -f "$img" ]; then
    head -c 64M /dev/urandom > "$dir/images/data.raw"
    truncate -s 2G "$dir/images/data.raw"
    qemu-img convert -q -f raw -O qcow2 "$dir/images/data.raw" "$img"
    rm -f "$dir/images/data.raw"
  fi
  # Published the way Ubuntu does: a qcow2 named .img.
  ln -f "$img" "$dir/images/noble-server-cloudimg-amd64.img" 2>/dev/null || cp "$img" "$dir/images/noble-server-cloudimg-amd64.img"
  bad="$dir/images/corrupt.qcow2"
  [ -f "$bad" ] || { printf 'QFI\373this is not a qcow2 image' > "$bad"; head -c 4096 /dev/urandom >> "$bad"; }
  [ -x "$sim" ] || { echo "pve-sim not built at $sim (run make build)" >&2; exit 1; }
  rm -rf "$dir/data"
  setsid nohup "$sim" --data-dir "$dir/data" --listen 127.0.0.1:0 --auth-failure-delay 0s \
    --user root@pam:pve-sim-demo --token 'root@pam!sankofa=5ec2e7a0-demo-token' \
    --seed-image "$img" --seed-image "$bad" "$@" > "$dir/pve-sim.out" 2> "$dir/pve-sim.err" < /dev/null &
  echo $! > "$dir/pve-sim.pid"
  web_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  setsid nohup python3 -m http.server --bind 127.0.0.1 --directory "$dir/images" "$web_port" \
    > "$dir/http.out" 2>&1 < /dev/null &
  echo $! > "$dir/http.pid"
  sha=$(sha256sum "$img" | cut -d' ' -f1)
  for _ in $(seq 1 100); do
    [ -s "$dir/data/sim.json" ] && break
    kill -0 "$(cat "$dir/pve-sim.pid")" 2>/dev/null || { cat "$dir/pve-sim.err" >&2; exit 1; }
    sleep 0.1
  done
  [ -s "$dir/data/sim.json" ] || { echo "pve-sim did not start" >&2; exit 1; }
  python3 - "$dir" "$web_port" "$sha" <<'PY'
import json, sys
d, web_port, sha = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(f"{d}/data/sim.json"))
with open(f"{d}/pve.yml", "w") as f:
    f.write("---\n# Connection to the pve-sim started by tests/ansible/sim-ctl.sh\n")
    for k, v in [("pve_api_host", s["host"]), ("pve_api_port", s["port"]), ("pve_api_user", "root@pam"),
                 ("pve_api_password", "pve-sim-demo"), ("pve_api_token_id", "root@pam!sankofa"),
                 ("pve_api_token_secret", "5ec2e7a0-demo-token"), ("pve_api_fingerprint", s["fingerprint"]),
                 ("pve_ca_path", s["ca"]), ("pve_node", s["nodes"][0]), ("pve_admin_url", s["admin"]),
                 ("pve_image", "local:import/noble-server-cloudimg-amd64.qcow2"),
                 ("pve_corrupt_image", "local:import/corrupt.qcow2"), ("pve_sim_data", s["data_dir"]),
                 ("pve_image_url", f"http://127.0.0.1:{web_port}/noble-server-cloudimg-amd64.img"),
                 ("pve_image_sha256", sha)]:
        f.write(f"{k}: {json.dumps(v)}\n")
PY
  echo "pve-sim running (pid $(cat "$dir/pve-sim.pid")): $(cat "$dir/data/sim.json")"
  ;;
stop)
  for f in pve-sim.pid http.pid; do
    [ -f "$dir/$f" ] || continue
    pid=$(cat "$dir/$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$f"
  done
  ;;
*)
  echo "usage: sim-ctl.sh start|stop DIR [pve-sim options]" >&2
  exit 2
  ;;
esac
