# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""sankofa.proxmox.proxmox: an inventory of Proxmox VE VMs, read by the vm_info binary."""

from __future__ import annotations

DOCUMENTATION = r"""
name: proxmox
short_description: Proxmox VE VMs as an inventory, read by the sankofa.proxmox.vm_info binary
version_added: 0.1.0
author:
  - Sankofa Proxmox maintainers (@sankofa)
description:
  - Lists the cluster's VMs with the M(sankofa.proxmox.vm_info) program, so authentication,
    certificate pinning, proxies and retries are the modules' own.
  - Groups the VMs by node (C(<prefix>node_<node>)), pool (C(<prefix>pool_<pool>)), tag
    (C(<prefix>tag_<tag>)) and status (C(<prefix>running), C(<prefix>stopped)); every VM is in
    C(<prefix>all_qemu).
  - Each host is named by the VM's name (its vmid when it has none) and gets the vars
    C(proxmox_vmid), C(proxmox_node), C(proxmox_status), C(proxmox_pool), C(proxmox_tags) and
    C(proxmox_template). These come from the cluster's VM listing and one VM list per node
    (for a live power state), so the inventory costs 1 + nodes requests (and a login with a
    password) whatever the number of VMs.
  - The per-VM facts cost requests on every VM and are read only when asked for, in O(facts)
    or by naming them in O(compose), O(groups) or O(keyed_groups) -
    C(proxmox_config) and C(proxmox_pending) (the config, current and pending; 1 request per
    VM), C(proxmox_snapshots) (1 request per VM), C(proxmox_agent_addresses) (the guest
    agent's reachable addresses; 2 requests per running VM, its config to see the agent is
    on, then the agent; none for a stopped VM). With the agent's addresses read,
    C(ansible_host) is the first of them, unless O(compose) sets it.
  - The expressions of O(compose), O(groups) and O(keyed_groups) are read conservatively - a
    fact's variable named anywhere in them (also inside a quoted string) reads that fact, and
    C(ansible_host) or a dynamic look-up (C(hostvars), C(vars), C(lookup), C(query)) reads
    them all.
  - The per-VM reads are made O(parallel) at a time.
  - The inventory file's name must end in C(proxmox.yml) or C(proxmox.yaml).
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin; C(sankofa.proxmox.proxmox).
    type: str
    required: true
    choices: [sankofa.proxmox.proxmox]
  api_host:
    description: Host name or address of a PVE node.
    type: str
    env:
      - name: PROXMOX_HOST
  api_port:
    description: Port of the PVE API.
    type: int
    env:
      - name: PROXMOX_PORT
  api_user:
    description: User for ticket login, as C(USER@REALM).
    type: str
    env:
      - name: PROXMOX_USER
  api_password:
    description: Password of O(api_user).
    type: str
    env:
      - name: PROXMOX_PASSWORD
  api_token_id:
    description: API token id, as C(USER@REALM!TOKENID).
    type: str
    env:
      - name: PROXMOX_TOKEN_ID
  api_token_secret:
    description: API token secret.
    type: str
    env:
      - name: PROXMOX_TOKEN_SECRET
  validate_certs:
    description: Check the server certificate against public roots (or O(ca_path)).
    type: bool
    env:
      - name: PROXMOX_VALIDATE_CERTS
  ca_path:
    description: PEM file of the CA to trust.
    type: str
    env:
      - name: PROXMOX_CA_PATH
  api_fingerprint:
    description: SHA-256 fingerprint of the node certificate to pin.
    type: str
    env:
      - name: PROXMOX_FINGERPRINT
  proxy:
    description: An HTTP proxy to reach PVE through (as the modules' C(proxy) option).
    type: str
  api_timeout:
    description: How long one HTTP request may take, as a duration (C(30s)).
    type: str
    env:
      - name: PROXMOX_API_TIMEOUT
  api_concurrency:
    description:
      - How many requests this controller's runs (the modules' and this plugin's) send to one PVE
        API endpoint at once, as the modules' C(api_concurrency) option; V(0) sends without waiting.
      - The default (1) leaves two of pveproxy's 3 workers to the web UI and other clients; raise it
        (to O(parallel)) for faster per-VM reads where nobody else uses the API.
    type: int
    env:
      - name: PROXMOX_API_CONCURRENCY
  timeout:
    description: Deadline of the whole listing, as a duration.
    type: str
    default: 5m
  parallel:
    description:
      - How many VMs are read at once, when per-VM facts are read.
      - The default is the 3 workers of a node's pveproxy; more requests in flight wait in its
        queue, which the client's load relief reads as load, and it then spaces its requests
        (1,000 VMs with every fact at 10 ms a request took over a minute at 8, 12.9 s at 3,
        with no request gate).
      - At most O(api_concurrency) of those reads are in flight at once (by default one).
    type: int
    default: 3
  facts:
    description:
      - Per-VM facts to read whether or not O(compose), O(groups) or O(keyed_groups) name them
        (for playbooks that use the host vars), each at its cost in requests -
        V(config) (C(proxmox_config), C(proxmox_pending); 1 request per VM),
        V(snapshots) (C(proxmox_snapshots); 1 request per VM),
        V(agent) (C(proxmox_agent_addresses) and C(ansible_host) from the guest agent; 2
        requests per running VM, 1 when V(config) is read too).
      - The default reads only what those options name; with none named, 1 + nodes requests
        for any number of VMs.
    type: list
    elements: str
    choices: [config, snapshots, agent]
    default: []
  tags:
    description: Only VMs that have all of these tags.
    type: list
    elements: str
    default: []
  pool:
    description: Only VMs in this pool.
    type: str
  node:
    description: Only VMs on this node.
    type: str
  group_prefix:
    description: The prefix of the groups this plugin makes.
    type: str
    default: proxmox_
  vm_info_executable:
    description:
      - The vm_info program to run; by default the one built for the controller's platform in
        this collection's C(plugins/bin/).
    type: str
    env:
      - name: SANKOFA_PROXMOX_VM_INFO
"""

EXAMPLES = r"""
# inventory/cluster.proxmox.yml
plugin: sankofa.proxmox.proxmox
api_host: pve1.example.com
api_token_id: automation@pve!ansible
api_fingerprint: "AB:CD:..."
keyed_groups:
  - key: proxmox_node
    prefix: on
compose:
  ansible_user: "'ubuntu'"
# The options above cost 1 + nodes requests, whatever the number of VMs. The two below add the
# guest agent's addresses as ansible_host (2 requests per running VM), and a group of the VMs
# with 4 cores or more (their configs: 1 request per VM, read because the expression names
# proxmox_config).
facts: [agent]
groups:
  big: (proxmox_config.cores | default(1) | int) >= 4
"""

import json
import os
import re
import subprocess
import tempfile

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

CONNECTION_OPTIONS = (
    'api_host', 'api_port', 'api_user', 'api_password', 'api_token_id', 'api_token_secret',
    'validate_certs', 'ca_path', 'api_fingerprint', 'proxy', 'api_timeout', 'api_concurrency',
)


# The per-VM facts, by the variables that hold them (a name starting with one of these).
FACT_VARIABLES = (
    ('config', ('proxmox_config', 'proxmox_pending')),
    ('snapshots', ('proxmox_snapshots',)),
    ('agent', ('proxmox_agent', 'ansible_host')),
)
FACTS = tuple(pair[0] for pair in FACT_VARIABLES)
# Names that can reach any variable by a computed name: they read every fact.
DYNAMIC_LOOKUPS = frozenset(('hostvars', 'vars', 'lookup', 'query', 'q', 'varnames'))
IDENTIFIER = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


def strings_in(value):
    """Every string in an option's value, dicts' keys left out (compose's keys name the vars
    it sets; keyed_groups' name their fields)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings_in(item)


def facts_named(expressions):
    """The per-VM facts that the Jinja expressions may read, conservatively: any identifier
    (in a quoted string too) that is a fact's variable, or a dynamic look-up, which may reach
    all of them."""
    wanted = set()
    for text in strings_in(expressions):
        for name in IDENTIFIER.findall(text):
            if name in DYNAMIC_LOOKUPS:
                return set(FACTS)
            wanted.update(fact for fact, prefixes in FACT_VARIABLES if name.startswith(prefixes))
    return wanted


def safe_group(name):
    """A group name Ansible accepts: anything but letters, digits and _ becomes _."""
    return re.sub(r'[^A-Za-z0-9_]', '_', name)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """The inventory of sankofa.proxmox."""

    NAME = 'sankofa.proxmox.proxmox'

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(('proxmox.yml', 'proxmox.yaml'))

    def _executable(self):
        given = self.get_option('vm_info_executable')
        if given:
            return given
        from ansible_collections.sankofa.proxmox.plugins.plugin_utils.binary_module import (
            binary_for, controller_platform)
        try:
            return binary_for('vm_info', controller_platform(), 'the controller')
        except Exception as e:
            raise AnsibleParserError(to_native(e))

    def _facts(self):
        """The per-VM facts to read: those O(facts) lists and those the constructed options name."""
        wanted = set(self.get_option('facts') or [])
        wanted |= facts_named([self.get_option(name) for name in ('compose', 'groups', 'keyed_groups')])
        return [fact for fact in FACTS if fact in wanted]

    def _arguments(self, facts):
        args = {'facts': facts}
        for name in CONNECTION_OPTIONS + ('timeout', 'parallel', 'tags', 'pool', 'node'):
            value = self.get_option(name)
            if value is not None and value != []:
                args[name] = value
        return args

    def _read(self, facts):
        """Runs vm_info for the per-VM `facts` and returns its list of VMs; a failed run fails
        the inventory with its message."""
        args = self._arguments(facts)
        with tempfile.NamedTemporaryFile('w', suffix='.json', delete=False) as f:
            json.dump(args, f)
            path = f.name
        try:
            # The file (it holds the credentials) is the caller's alone: mkstemp makes it 0600.
            run = subprocess.run([self._executable(), path], capture_output=True, text=True, check=False)
        finally:
            os.unlink(path)
        try:
            result = json.loads(run.stdout)
        except ValueError:
            raise AnsibleError('sankofa.proxmox.vm_info printed no result (exit %d): %s' % (
                run.returncode, run.stderr.strip()[-2000:]))
        if result.get('failed'):
            raise AnsibleError('sankofa.proxmox.vm_info failed: %s' % result.get('msg'))
        return result.get('vms', [])

    def _populate(self, vms, facts):
        """Adds the VMs to the inventory; ``facts`` are the per-VM facts that ``vms`` holds.

        Almost all of the time is ansible-core's: each ``set_variable`` checks its value and
        tags it with its origin. So a host costs ``add_host``, one ``set_variable`` per var
        the docs promise (each set, a default or empty one too: an unset var would be
        undefined to a playbook, not ``None`` or ``[]``) and one ``add_child`` per group,
        and nothing else of ansible-core's unless compose, groups or keyed_groups are given.
        """
        prefix = self.get_option('group_prefix')
        strict = self.get_option('strict')
        compose = self.get_option('compose')
        composed_groups = self.get_option('groups')
        keyed_groups = self.get_option('keyed_groups')
        # A host's merged vars are built only for the Constructable options that read them.
        constructed = bool(compose or composed_groups or keyed_groups)
        # The inventory's methods, looked up once: ansible-core hands plugins a proxy whose
        # attributes are found by a Python-level __getattr__.
        add_host, add_group = self.inventory.add_host, self.inventory.add_group
        add_child, set_variable = self.inventory.add_child, self.inventory.set_variable
        # The per-VM facts' vars by vm_info's keys, looked for only where facts were read.
        fact_vars = (('config', 'proxmox_config'), ('pending', 'proxmox_pending'),
                     ('snapshots', 'proxmox_snapshots'),
                     ('agent_addresses', 'proxmox_agent_addresses')) if facts else ()
        all_group = add_group(safe_group(prefix + 'all_qemu'))
        # Each group made once, by the name this plugin gives it, not once per host in it.
        made = {}
        for vm in vms:
            host = vm.get('name') or str(vm['vmid'])
            add_host(host, group=all_group)
            node, status, pool, tags = vm['node'], vm.get('status'), vm.get('pool'), vm.get('tags', [])
            set_variable(host, 'proxmox_vmid', vm['vmid'])
            set_variable(host, 'proxmox_node', node)
            set_variable(host, 'proxmox_status', status)
            set_variable(host, 'proxmox_pool', pool)
            set_variable(host, 'proxmox_tags', tags)
            set_variable(host, 'proxmox_template', vm.get('template', False))
            # The per-VM facts, where they were read.
            for key, name in fact_vars:
                if key in vm:
                    set_variable(host, name, vm[key])
            if vm.get('agent_addresses'):
                set_variable(host, 'ansible_host', vm['agent_addresses'][0])
            groups = [prefix + 'node_' + node]
            if pool:
                groups.append(prefix + 'pool_' + pool)
            groups.extend(prefix + 'tag_' + tag for tag in tags)
            if status in ('running', 'stopped'):
                groups.append(prefix + status)
            for group in groups:
                name = made.get(group)
                if name is None:
                    name = made[group] = add_group(safe_group(group))
                add_child(name, host)
            if constructed:
                variables = self.inventory.get_host(host).get_vars()
                self._set_composite_vars(compose, variables, host, strict=strict)
                self._add_host_to_composed_groups(composed_groups, variables, host, strict=strict)
                self._add_host_to_keyed_groups(keyed_groups, variables, host, strict=strict)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option('cache') and cache
        update_cache = self.get_option('cache') and not cache
        facts = self._facts()
        vms = None
        if use_cache:
            try:
                cached = self._cache[cache_key]
            except KeyError:
                cached = None
            # A cache of fewer facts than these options need (or of the older list form) is read anew.
            if isinstance(cached, dict) and set(facts) <= set(cached.get('facts', [])):
                vms, facts = cached['vms'], cached.get('facts', [])
            else:
                update_cache = True
        if vms is None:
            vms = self._read(facts)
        if update_cache:
            self._cache[cache_key] = {'facts': facts, 'vms': vms}
        self._populate(vms, facts)
