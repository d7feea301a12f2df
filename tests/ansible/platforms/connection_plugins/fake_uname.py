# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A test connection: a remote host that runs commands here but answers `uname -sm` as told.

tests/ansible/platforms.sh uses it to stand in for a Mac or an ARM host: the action plugins must treat
it as a remote host (its transport is not local), ask it for its platform once, and pick (or
fail to find) the binary for the platform it names. Every command it runs is appended to the
file in $FAKE_UNAME_LOG, so the test can count the round trips.
"""

from __future__ import annotations

import os

from ansible.plugins.connection.local import Connection as LocalConnection

DOCUMENTATION = r"""
name: fake_uname
short_description: Runs commands locally, answers uname -sm with a given platform
description:
  - A test connection for tests/ansible/platforms.sh.
author:
  - sankofa.proxmox maintainers
options:
  uname:
    description: What C(uname -sm) prints (C(Darwin arm64)); empty makes it fail as on a host without uname.
    type: str
    default: ''
    vars:
      - name: fake_uname
"""


class Connection(LocalConnection):
    """Local commands, a remote host's transport, a made-up uname."""

    transport = 'fake_uname'

    def exec_command(self, cmd, in_data=None, sudoable=True):
        log = os.environ.get('FAKE_UNAME_LOG')
        if log:
            with open(log, 'a', encoding='utf-8') as out:
                out.write('%s %s\n' % (self._play_context.remote_addr, cmd))
        if 'uname -sm' in cmd:
            answer = self.get_option('uname')
            if not answer:
                return 127, b'', b'/bin/sh: 1: uname: not found\n'
            return 0, (answer + '\n').encode(), b''
        return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
