# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""sankofa.proxmox.vm_info: runs the vm_info binary built for the platform the task runs on (see plugins/plugin_utils/binary_module.py)."""

from __future__ import annotations

from ansible_collections.sankofa.proxmox.plugins.plugin_utils.binary_module import BinaryModuleAction


class ActionModule(BinaryModuleAction):
    """The action of sankofa.proxmox.vm_info."""

    MODULE = 'vm_info'
