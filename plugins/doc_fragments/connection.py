# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The connection options every sankofa.proxmox module takes, documented once."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  api_host:
    description:
      - Host name or address of a PVE node. Environment variable E(PROXMOX_HOST).
    type: str
    required: true
  api_port:
    description:
      - Port of the PVE API. Environment variable E(PROXMOX_PORT).
    type: int
    default: 8006
  api_user:
    description:
      - User for ticket login, as C(USER@REALM). Environment variable E(PROXMOX_USER).
    type: str
    default: root@pam
  api_password:
    description:
      - Password of O(api_user). Environment variable E(PROXMOX_PASSWORD). Never logged.
      - Exactly one of O(api_password) and O(api_token_id) is required.
    type: str
  api_token_id:
    description:
      - API token id, as C(USER@REALM!TOKENID), or C(TOKENID) together with O(api_user).
        Environment variable E(PROXMOX_TOKEN_ID).
    type: str
  api_token_secret:
    description:
      - API token secret. Environment variable E(PROXMOX_TOKEN_SECRET). Never logged.
    type: str
  validate_certs:
    description:
      - Check the server certificate against public roots (or O(ca_path)). PVE's default
        certificate is self-signed; prefer O(api_fingerprint) or O(ca_path) to turning this
        off. Environment variable E(PROXMOX_VALIDATE_CERTS).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA to trust, such as the cluster CA C(/etc/pve/pve-root-ca.pem).
        Environment variable E(PROXMOX_CA_PATH).
    type: str
  api_fingerprint:
    description:
      - SHA-256 fingerprint of the node certificate to pin (as printed by
        C(pvenode cert info)); the connection is refused if the server presents another
        certificate. Environment variable E(PROXMOX_FINGERPRINT).
    type: str
  proxy:
    description:
      - An HTTP proxy to reach PVE through, as C(http://[user:password@]host:port); the
        connection is tunnelled with C(CONNECT), so the certificate check (O(ca_path),
        O(api_fingerprint)) still applies to PVE's own certificate end to end.
      - Without it, the proxy comes from the environment as curl reads it for an https URL
        (E(https_proxy)/E(HTTPS_PROXY), then E(all_proxy)/E(ALL_PROXY); E(http_proxy) is for
        http URLs only), except for the hosts in E(no_proxy)/E(NO_PROXY).
      - An empty string connects directly, whatever the environment says. A proxy that
        cannot be reached or refuses the tunnel fails the run at once, naming the proxy.
    type: str
  api_timeout:
    description:
      - How long one HTTP request may take, as a duration (C(30s), C(2m)).
        Environment variable E(PROXMOX_API_TIMEOUT).
    type: str
    default: 30s
  api_concurrency:
    description:
      - How many requests this controller's runs send to one PVE API endpoint (O(api_host) and
        O(api_port) as given) at once, all modules, forks and threads together; a request waits
        for one of them before it is sent. Environment variable E(PROXMOX_API_CONCURRENCY).
      - pveproxy serves with 3 workers (pve-manager C(PVE/Service/pveproxy.pm); C(MAX_WORKERS)
        in C(/etc/default/pveproxy) since PVE 9.0), each an event loop owning the connections it
        accepted. A fleet (50 forks) that keeps a request in flight on all three makes the web
        UI and every other client wait behind it. The default V(1) leaves two to them, and no
        request of theirs waits behind more than one of this controller's; with V(2) both can be
        on the worker that holds the web UI's connection. In the fleet bench (pve-sim at 30 ms a
        request) the web UI's poll took at most 1.9 times its idle latency (p95) with V(1), up to
        2.3 times with V(2), 3.9 to 8.3 times without a gate.
      - A fleet bound by PVE's request cost is faster with more (200 VMs at 30 ms a request took
        about 70 s with V(1), 42 s with V(2)); across a long round trip a request waits on the
        network more than on pveproxy, and V(2) or V(3) costs the web UI less there.
      - V(0) sends without waiting, as before this option.
      - The runs share lock files in C($XDG_RUNTIME_DIR/sankofa-proxmox/gates/), else
        C(~/.ansible/sankofa-proxmox/gates/), made mode 0700 and used only when the user owns
        them and no one else may write them. Where none can be made (a read-only home) the run
        sends without waiting and says why at C(-vvv). A slot is freed when its process ends,
        even when killed. Runs of another user, or on another controller, are not counted.
    type: int
    default: 1
"""
