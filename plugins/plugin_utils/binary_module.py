# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs a sankofa.proxmox module as the Rust binary built for the host the task runs on.

The modules are compiled programs, one per platform, kept in the collection's
``plugins/bin/<platform>/`` folders (``plugins/bin/linux-x86_64/vm``, ``plugins/bin/darwin-aarch64/vm``, ...;
not a top-level ``bin/``, which ansible-test reads as Python scripts). Ansible would pick one file
for every host; the action plugins named like the modules (``plugins/action/vm.py``) use this
class to pick the one that runs where the task runs, then let Ansible transfer and run it as it
runs any binary module (args file, check mode, diff, ``async``, ``module_defaults``).

Which platform a task runs on:

* a local connection (``connection: local``, ``delegate_to: localhost``): the controller's own,
  read from Python's ``platform`` module, without a round trip;
* any other connection: the target's facts (``ansible_system``, ``ansible_architecture``) when
  they were gathered, or else one ``uname -sm`` on it.
"""

from __future__ import annotations

import copy
import os
import platform

from ansible.errors import AnsibleActionFail
from ansible.plugins.action.normal import ActionModule as NormalActionModule

COLLECTION = 'sankofa.proxmox'

# <collection root>/plugins/plugin_utils/binary_module.py -> <collection root>/plugins/bin
BIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'bin')

# What `uname -m`, Python and the facts call a machine, in the names the plugins/bin/ folders use (the
# Rust target's first part): macOS and the BSDs say arm64 and amd64.
MACHINE_NAMES = {
    'arm64': 'aarch64',
    'amd64': 'x86_64',
}


def platform_name(system, machine):
    """The plugins/bin/ folder name of a platform: ``linux-x86_64`` from ``Linux`` and ``x86_64``."""
    system = str(system).strip().lower()
    machine = str(machine).strip().lower()
    return '%s-%s' % (system, MACHINE_NAMES.get(machine, machine))


def available_platforms(module, bin_dir=BIN_DIR):
    """The platforms this copy of the collection has a binary of ``module`` for, sorted."""
    try:
        entries = os.listdir(bin_dir)
    except OSError:
        return []
    return sorted(entry for entry in entries if os.path.isfile(os.path.join(bin_dir, entry, module)))


def binary_for(module, platform_id, where, bin_dir=BIN_DIR, controller=None):
    """The path of ``module``'s binary for ``platform_id``; AnsibleActionFail naming the platform
    and the platforms this copy has where there is none.

    ``where`` says whose platform it is (for the message); ``controller`` is the controller's
    platform when the task runs elsewhere, so the message can say whether running the task on the
    controller would work.
    """
    path = os.path.join(bin_dir, platform_id, module)
    if os.path.isfile(path):
        return path
    have = available_platforms(module, bin_dir)
    msg = '%s.%s has no binary for %s, the platform of %s. This copy of the collection (%s) has %s.' % (
        COLLECTION, module, platform_id, where, bin_dir,
        'binaries for ' + ', '.join(have) if have else 'no binaries at all (build them with `make build`)',
    )
    msg += ' Install a release of the collection built for %s, or build it there with `make build`.' % platform_id
    if controller and controller != platform_id and controller in have:
        msg += ' Or run the task on the controller (delegate_to: localhost), which is %s.' % controller
    raise AnsibleActionFail(msg)


def controller_platform():
    """The platform of the machine this Python runs on (the controller)."""
    return platform_name(platform.system(), platform.machine())


class _ModuleLoaderView:
    """The module loader, except that it resolves one module to the binary picked for the host."""

    def __init__(self, loader, fqcn, path):
        self._loader = loader
        self._fqcn = fqcn
        self._path = path

    def find_plugin_with_context(self, *args, **kwargs):
        """Resolves as the loader does; for our module, points the result at the binary."""
        context = self._loader.find_plugin_with_context(*args, **kwargs)
        if context.resolved and context.resolved_fqcn == self._fqcn:
            context = copy.copy(context)
            context.plugin_resolved_path = self._path
        return context

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _SharedLoaderView:
    """The shared plugin loaders of the task, with the module loader above in place."""

    def __init__(self, shared, module_loader):
        self._shared = shared
        self.module_loader = module_loader

    def __getattr__(self, name):
        return getattr(self._shared, name)


class BinaryModuleAction(NormalActionModule):
    """Ansible's normal action (check mode, async, module_defaults as for any module), running
    the binary of ``MODULE`` built for the platform the task runs on."""

    MODULE = ''

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        fqcn = '%s.%s' % (COLLECTION, self.MODULE)
        try:
            path = binary_for(self.MODULE, *self._target_platform(task_vars), controller=controller_platform())
        except AnsibleActionFail as error:
            return {'failed': True, 'msg': error.message}
        loaders = self._shared_loader_obj
        self._shared_loader_obj = _SharedLoaderView(loaders, _ModuleLoaderView(loaders.module_loader, fqcn, path))
        try:
            return super().run(tmp, task_vars)
        finally:
            self._shared_loader_obj = loaders

    def _target_platform(self, task_vars):
        """(platform, whose it is) of the host the module will run on."""
        host = self._task.delegate_to or task_vars.get('inventory_hostname', 'the target')
        if self._connection.transport == 'local':
            return controller_platform(), '%s (a local connection: this controller)' % host
        if self._task.delegate_to:
            host_vars = (task_vars.get('ansible_delegated_vars') or {}).get(self._task.delegate_to) or {}
        else:
            host_vars = task_vars
        facts = host_vars.get('ansible_facts') or {}
        if facts.get('system') and facts.get('architecture'):
            return (platform_name(facts['system'], facts['architecture']),
                    '%s (its facts: %s %s)' % (host, facts['system'], facts['architecture']))
        found = self._low_level_execute_command('uname -sm', sudoable=False)
        words = found.get('stdout', '').split()
        if found.get('rc') != 0 or len(words) != 2:
            raise AnsibleActionFail('%s.%s could not tell the platform of %s: `uname -sm` exited %s with %r%s' % (
                COLLECTION, self.MODULE, host, found.get('rc'), found.get('stdout', '').strip(),
                (', stderr %r' % found.get('stderr', '').strip()) if found.get('stderr') else ''))
        return platform_name(*words), '%s (uname -sm: %s)' % (host, ' '.join(words))
