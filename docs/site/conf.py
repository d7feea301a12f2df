# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Sphinx settings of the sankofa.proxmox docs site (docs/build.sh builds it).

Started from `antsibull-docs sphinx-init`. Two changes: the title, and no inventories fetched
from the network (the build runs offline): the few labels of Ansible's own docs that the
generated module pages link to resolve through a local inventory that docs/build.sh writes
from docs/site/ansible-devel-labels.txt (its path in $SANKOFA_DOCS_INVENTORY).
"""

import os

project = 'sankofa.proxmox'
copyright = 'sankofa.proxmox contributors'
title = 'sankofa.proxmox: Proxmox VE VMs from cloud images'
html_short_title = 'sankofa.proxmox'

extensions = ['sphinx.ext.intersphinx', 'sphinx_antsibull_ext']

pygments_style = 'ansible'
highlight_language = 'YAML+Jinja'

html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False

inventory = os.environ.get('SANKOFA_DOCS_INVENTORY')
if not inventory:
    raise RuntimeError('build the site with docs/build.sh (make docs): it writes the inventory of '
                       "Ansible's labels and names it in SANKOFA_DOCS_INVENTORY")
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', inventory),
}

default_role = 'any'
nitpicky = True
