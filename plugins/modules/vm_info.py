# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""sankofa.proxmox.vm_info, documentation only.

The module is a Rust program (src/bin/vm_info.rs), built once per platform into plugins/bin/<platform>/vm_info;
the action plugin of the same name (plugins/action/vm_info.py) runs the one built for the host the
task runs on. Its documentation, options and return values are in the sidecar file vm_info.yml
beside this one, which ansible-doc, ansible-test and antsibull-docs read. This file exists so
that Ansible finds a text module to list (ansible-doc -l reads a module file as text).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
