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

Live progress: where the task runs on a local connection, without ``async``, ``become`` or
``no_log``, Ansible's own module execution still does everything (args file, environment,
result parsing, warnings, temp files), except that the one command that runs the module is
started here instead of by the connection: with ``SANKOFA_PROGRESS=1`` in its environment, so
the binary writes a JSON line on stderr for each new percentage of a long copy, which is read
while the task runs and shown with Ansible's ``Display`` (see progress.py for which lines).
Those lines are taken out of the stderr the result sees. Anywhere else (another host,
``async``, ``become``, ``no_log``) the module runs as Ansible runs it, and its result still
carries ``tasks[].progress``.

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
import selectors
import signal
import subprocess
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action.normal import ActionModule as NormalActionModule
from ansible.utils.display import Display

from ansible_collections.sankofa.proxmox.plugins.plugin_utils.progress import ProgressView, parse_event

COLLECTION = 'sankofa.proxmox'

display = Display()

# What asks the binary for its progress events (src/ansible/progress.rs).
PROGRESS_ENV = 'SANKOFA_PROGRESS'

# How long a module asked to stop (the task's timeout, Ctrl-C) has to print its result and
# end before it is killed.
STOP_GRACE_SECONDS = 5

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


def live_progress(transport, async_val, become, no_log):
    """Whether the action runs the module command itself and shows its progress: only where
    it runs on this controller (a local connection), waited for (not ``async``), without
    ``become`` (the connection's password dance stays the connection's) and not ``no_log``."""
    return transport == 'local' and not async_val and not become and not no_log


def run_streaming(cmd, cwd, on_event, in_data=None, executable=None):
    """Runs ``cmd`` as the local connection runs a command (a shell, the task's directory),
    with ``SANKOFA_PROGRESS=1`` added to the environment; calls ``on_event`` with each
    progress event read from its stderr while it runs. Returns (rc, stdout, stderr) as the
    connection does, as bytes, the event lines taken out of stderr.

    If the wait ends early (the task's ``timeout``, Ctrl-C), the command is asked to stop
    (SIGTERM: the module ends its wait and prints its result) and killed after
    ``STOP_GRACE_SECONDS``. The command runs in a session of its own, and the signals go to
    its whole process group: the shell forks the module (``… && sleep 0``), so a signal to the
    shell alone would leave the module running.
    """
    env = dict(os.environ)
    env[PROGRESS_ENV] = '1'
    proc = subprocess.Popen(
        to_bytes(cmd), shell=True, executable=executable, cwd=cwd, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    out = []
    err = []
    pending = b''
    try:
        if in_data:
            proc.stdin.write(in_data)
        proc.stdin.close()
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            while selector.get_map():
                for key, dummy in selector.select():
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    if key.fileobj is proc.stdout:
                        out.append(chunk)
                        continue
                    pending += chunk
                    lines = pending.split(b'\n')
                    pending = lines.pop()
                    for line in lines:
                        event = parse_event(to_text(line, errors='surrogate_or_replace'))
                        if event is None:
                            err.append(line + b'\n')
                        else:
                            on_event(event)
        err.append(pending)
        proc.wait()
    except BaseException:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, b''.join(out), b''.join(err)


def signal_group(proc, signum):
    """Sends ``signum`` to the process group ``proc`` leads (its own session), if any of it
    is still there."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


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
    # The command Ansible built to run the module, while _execute_module runs it live.
    _module_command = None

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

    def _execute_module(self, *args, **kwargs):
        """Ansible's module execution; where the progress is shown live, it notes the command
        Ansible builds to run the module (``build_module_command``, called once), so that
        ``_low_level_execute_command`` knows that command from the chmod and cleanup ones."""
        self._module_command = None
        if not live_progress(self._connection.transport, kwargs.get('wrap_async') or self._task.async_val,
                             self._connection.become, self._task.no_log or C.DEFAULT_NO_LOG):
            return super()._execute_module(*args, **kwargs)
        shell = self._connection._shell
        build = shell.build_module_command

        def noted(*build_args, **build_kwargs):
            command = build(*build_args, **build_kwargs)
            self._module_command = command.strip()
            return command

        shell.build_module_command = noted
        try:
            return super()._execute_module(*args, **kwargs)
        finally:
            del shell.build_module_command
            self._module_command = None

    def _low_level_execute_command(self, cmd, *args, **kwargs):
        """Ansible's, except that the module's own command is started by ``run_streaming``
        (through the connection's ``exec_command`` for the one call), which shows its progress
        events as they come."""
        if not getattr(self, '_module_command', None) or cmd != self._module_command:
            return super()._low_level_execute_command(cmd, *args, **kwargs)
        connection = self._connection
        view = ProgressView(self._task.get_name().strip() or self.MODULE, display.verbosity)

        def show(event):
            for line in view.feed(event, time.monotonic()):
                display.display(line)

        def exec_command(command, in_data=None, sudoable=True):
            # As the local connection's: the configured shell, the task's directory.
            executable = C.DEFAULT_EXECUTABLE.split()[0] if C.DEFAULT_EXECUTABLE else None
            if executable and not os.path.exists(to_bytes(executable, errors='surrogate_or_strict')):
                raise AnsibleError('failed to find the executable specified %s.'
                                   ' Please verify if the executable exists and re-try.' % executable)
            display.vvv('EXEC %s' % to_text(command), host=self._play_context.remote_addr)
            return run_streaming(command, getattr(connection, 'cwd', None), show, in_data=in_data,
                                 executable=executable)

        connection.exec_command = exec_command
        try:
            return super()._low_level_execute_command(cmd, *args, **kwargs)
        finally:
            del connection.exec_command

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
