# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the play shows of a long task's progress: events in, lines out.

When an action plugin runs a module binary itself (see binary_module.py), the binary writes
one JSON line on stderr for each new percentage a copy reports (an import, a disk move, a
migration's mirrored disks, a clone, a download)::

    {"sankofa_progress": {"upid": "UPID:pve1:...", "node": "pve1", "task": "qmcreate",
     "vmid": 100, "what": "import local:import/noble.qcow2", "copy": 1, "percent": 45.0,
     "done_bytes": 1208925819, "total_bytes": 2684354560, "rate_bytes_per_s": 39845888.0,
     "eta_s": 37, "elapsed_s": 31.2}}

Unknown values are null. This module turns those lines into what the play shows: at the
default verbosity one line per copy when it starts, then one per 10 % or per 30 s, whichever
comes first; with -v, every event. It does no I/O and reads no clock (the caller passes the
time), so the thresholds are tested on their own.
"""

from __future__ import annotations

import json

EVENT_KEY = 'sankofa_progress'

# The default verbosity shows a line when the copy has gone this many percent further, or
# this many seconds have passed, since the last line shown for it.
STEP_PERCENT = 10
INTERVAL_SECONDS = 30.0

BYTE_UNITS = ('B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB')


def parse_event(line):
    """The event a stderr line holds, or None for any other line."""
    text = line.strip()
    if not text.startswith('{"%s"' % EVENT_KEY):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or list(data) != [EVENT_KEY] or not isinstance(data[EVENT_KEY], dict):
        return None
    event = data[EVENT_KEY]
    if not isinstance(event.get('percent'), (int, float)):
        return None
    return event


def human_bytes(count):
    """A size as PVE's logs write it: ``1.2 GiB``."""
    value = float(count)
    unit = 0
    while value >= 1024.0 and unit < len(BYTE_UNITS) - 1:
        value /= 1024.0
        unit += 1
    if unit == 0:
        return '%d B' % value
    return '%.1f %s' % (value, BYTE_UNITS[unit])


def human_rate(bytes_per_s):
    """A rate in MiB/s (as PVE reports a copy's): ``38 MiB/s``, ``2.5 MiB/s``."""
    mib = float(bytes_per_s) / 1048576.0
    if mib >= 10:
        return '%d MiB/s' % round(mib)
    return '%.1f MiB/s' % mib


def human_left(seconds):
    """The time left: ``~40 s left``, ``~3 min left``."""
    seconds = int(round(seconds))
    if seconds < 120:
        return '~%d s left' % seconds
    return '~%d min left' % round(seconds / 60.0)


def describe(event):
    """One event in words: ``import scsi0 45 % (1.2 GiB of 2.6 GiB, 38 MiB/s, ~40 s left)``."""
    parts = []
    done, total = event.get('done_bytes'), event.get('total_bytes')
    if isinstance(done, (int, float)) and isinstance(total, (int, float)):
        parts.append('%s of %s' % (human_bytes(done), human_bytes(total)))
    rate = event.get('rate_bytes_per_s')
    if isinstance(rate, (int, float)) and rate > 0:
        parts.append(human_rate(rate))
    left = event.get('eta_s')
    if isinstance(left, (int, float)) and event['percent'] < 100:
        parts.append(human_left(left))
    text = '%s %d %%' % (event.get('what') or 'copy', int(event['percent']))
    if parts:
        text += ' (%s)' % ', '.join(parts)
    return text


def where(event):
    """Which VM (or node) the copy is for: ``VM 100`` or ``pve1``."""
    vmid = event.get('vmid')
    if isinstance(vmid, int):
        return 'VM %d' % vmid
    return str(event.get('node') or 'PVE')


class ProgressView:
    """The lines a task shows for its events, by verbosity and the thresholds above.

    ``feed(event, now)`` returns the lines to show for one event (none, or one); ``now`` is
    any monotonic clock in seconds. Each copy (a task's UPID and its copy number) is followed
    on its own: its first event is shown, then at default verbosity an event whose percentage
    is at least ``step`` past the last shown one's step, or that comes ``interval`` seconds or
    more after it, or the copy's 100 %; with verbosity 1 or more, every event.
    """

    def __init__(self, task_name, verbosity=0, step=STEP_PERCENT, interval=INTERVAL_SECONDS):
        self.task_name = task_name
        self.verbosity = verbosity
        self.step = step
        self.interval = interval
        self.shown = {}

    def due(self, event, now):
        """Whether this event is shown (and, if it is, remembers it as the last shown)."""
        key = (event.get('upid'), event.get('copy'))
        percent = float(event['percent'])
        last = self.shown.get(key)
        show = (
            self.verbosity >= 1
            or last is None
            or int(percent // self.step) > int(last[0] // self.step)
            or now - last[1] >= self.interval
            or (percent >= 100 and last[0] < 100)
        )
        if show:
            self.shown[key] = (percent, now)
        return show

    def line(self, event):
        """The line shown for an event."""
        return 'TASK [%s] %s: %s' % (self.task_name, where(event), describe(event))

    def feed(self, event, now):
        """The lines to show for one event."""
        if not self.due(event, now):
            return []
        return [self.line(event)]
