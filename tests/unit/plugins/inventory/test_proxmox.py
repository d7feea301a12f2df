# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Unit tests of plugins/inventory/proxmox.py: which per-VM facts (each a request per VM) the
inventory's compose, groups and keyed_groups options make it read.

Plain functions, as pytest (and ansible-test units) collect them; also runnable without either
(``python3 test_proxmox.py``, the collection on PYTHONPATH).
"""

from __future__ import annotations

import sys

from ansible_collections.sankofa.proxmox.plugins.inventory.proxmox import (
    InventoryModule,
    facts_named,
    safe_group,
    strings_in,
)


class RecordingInventory:
    """The inventory calls _populate makes, recorded: each host's vars and each group's hosts."""

    def __init__(self):
        self.vars = {}
        self.groups = {}

    def add_group(self, group):
        self.groups.setdefault(group, [])
        return group

    def add_host(self, host, group=None):
        self.vars.setdefault(host, {})
        self.groups[group].append(host)

    def set_variable(self, host, name, value):
        self.vars[host][name] = value

    def add_child(self, group, host):
        self.groups[group].append(host)


def populated(vms, facts):
    """What _populate makes of vm_info's `vms` with the default options."""
    plugin = InventoryModule()
    options = {'group_prefix': 'proxmox_', 'strict': False}
    plugin.get_option = options.get
    plugin.inventory = RecordingInventory()
    plugin._populate(vms, facts)
    return plugin.inventory


def test_the_listings_alone_need_no_fact():
    # The listings' own vars, and any name that is no fact's, read nothing per VM.
    options = [{'ansible_user': "'ubuntu'", 'on_pve1': "proxmox_node == 'pve1'"},
               {'big': "'web' in proxmox_tags and proxmox_status == 'running'"},
               [{'key': 'proxmox_pool', 'prefix': 'pool'}, {'key': 'proxmox_template'}]]
    assert facts_named(options) == set()


def test_each_fact_by_its_variables():
    assert facts_named([{'cores': 'proxmox_config.cores'}]) == {'config'}
    assert facts_named([{'changed': 'proxmox_pending | length > 0'}]) == {'config'}
    assert facts_named([[{'key': 'proxmox_snapshots | length'}]]) == {'snapshots'}
    assert facts_named([{'ip': 'proxmox_agent_addresses | first'}]) == {'agent'}


def test_ansible_host_reads_the_agent():
    # ansible_host defaults to the agent's first address: a compose reading it needs that.
    assert facts_named([{'target': 'ansible_host'}]) == {'agent'}


def test_a_quoted_name_counts_too():
    assert facts_named([{'x': "'proxmox_snapshots'"}]) == {'snapshots'}


def test_compose_keys_are_not_expressions():
    # compose's keys name the vars it sets; setting proxmox_config reads nothing.
    assert facts_named([{'proxmox_config': "'given'"}]) == set()


def test_a_dynamic_look_up_reads_every_fact():
    for expression in ("hostvars[inventory_hostname]['proxmox_config']", "vars['x']",
                       "lookup('env', 'HOME')", "query('inventory_hostnames', 'all')"):
        assert facts_named([{'x': expression}]) == {'config', 'snapshots', 'agent'}, expression


def test_no_options_no_strings():
    assert list(strings_in([None, {}, []])) == []
    assert sorted(strings_in({'a': ['b', {'c': 'd'}], 'e': 1})) == ['b', 'd']


def test_group_names_ansible_accepts():
    assert safe_group('proxmox_tag_web-1.a') == 'proxmox_tag_web_1_a'
    assert safe_group('proxmox_node_pve1') == 'proxmox_node_pve1'


def test_every_documented_var_is_set_the_empty_ones_too():
    # A var left unset would be undefined to a playbook (`proxmox_pool == 'web'` an error),
    # not None: the listing's vars are set on every host, whatever their value.
    inventory = populated([{'vmid': 100, 'node': 'pve1', 'name': None, 'status': 'stopped',
                            'pool': None, 'tags': [], 'template': False}], [])
    assert inventory.vars == {'100': {'proxmox_vmid': 100, 'proxmox_node': 'pve1', 'proxmox_status': 'stopped',
                                      'proxmox_pool': None, 'proxmox_tags': [], 'proxmox_template': False}}
    assert inventory.groups == {'proxmox_all_qemu': ['100'], 'proxmox_node_pve1': ['100'], 'proxmox_stopped': ['100']}


def test_the_facts_vars_where_read():
    vm = {'vmid': 101, 'node': 'pve2', 'name': 'web1', 'status': 'running', 'pool': 'team', 'tags': ['web'],
          'template': False, 'config': {'cores': 2}, 'pending': {}, 'snapshots': [], 'agent_addresses': ['10.0.0.5']}
    hostvars = populated([vm], ['config', 'snapshots', 'agent']).vars['web1']
    assert hostvars['proxmox_config'] == {'cores': 2} and hostvars['proxmox_snapshots'] == []
    assert hostvars['proxmox_agent_addresses'] == ['10.0.0.5'] and hostvars['ansible_host'] == '10.0.0.5'
    inventory = populated([dict(vm, agent_addresses=None)], ['config', 'snapshots', 'agent'])
    assert inventory.vars['web1']['proxmox_agent_addresses'] is None and 'ansible_host' not in inventory.vars['web1']
    assert sorted(inventory.groups) == ['proxmox_all_qemu', 'proxmox_node_pve2', 'proxmox_pool_team', 'proxmox_running',
                                        'proxmox_tag_web']


def main():
    """Runs every test here; exits non-zero naming the first that fails."""
    tests = [value for name, value in sorted(globals().items()) if name.startswith('test_')]
    for test in tests:
        test()
    sys.stdout.write('inventory plugin: %d tests passed\n' % len(tests))


if __name__ == '__main__':
    main()
