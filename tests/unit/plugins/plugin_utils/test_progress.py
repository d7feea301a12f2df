# -*- coding: utf-8 -*-
# Copyright: sankofa.proxmox contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Unit tests of plugins/plugin_utils/progress.py: which progress lines the play shows.

Plain functions, as pytest (and ansible-test units) collect them; tests/ansible/progress.sh
runs them without either (``python3 test_progress.py``, the collection on PYTHONPATH).
"""

from __future__ import annotations

import json
import sys

from ansible_collections.sankofa.proxmox.plugins.plugin_utils.progress import (
    ProgressView,
    describe,
    human_bytes,
    human_left,
    human_rate,
    parse_event,
)

UPID = 'UPID:pve1:00001234:00005678:65000000:qmcreate:100:root@pam:'
GIB = 1024 ** 3


def event(percent, copy=1, upid=UPID, **extra):
    """An event as the binary writes it (the fields src/ansible/progress.rs documents)."""
    fields = {
        'upid': upid, 'node': 'pve1', 'task': 'qmcreate', 'vmid': 100, 'what': 'import scsi0',
        'copy': copy, 'percent': percent, 'done_bytes': None, 'total_bytes': None,
        'rate_bytes_per_s': None, 'eta_s': None, 'elapsed_s': 1.0,
    }
    fields.update(extra)
    return fields


def shown(view, timed_events):
    """The percentages of the events the view shows, fed at the given times."""
    return [item['percent'] for now, item in timed_events if view.feed(item, now)]


def test_parses_only_progress_lines():
    line = json.dumps({'sankofa_progress': event(45.0)})
    assert parse_event(line) == event(45.0)
    assert parse_event(line + '\n') == event(45.0)
    for other in ('', 'thread panicked', '{"sankofa_progress": ', '{"failed": true}',
                  '{"sankofa_progress": {"percent": "x"}}', '{"sankofa_progress": [1]}',
                  json.dumps({'sankofa_progress': event(1.0), 'other': 1})):
        assert parse_event(other) is None, other


def test_describes_an_event_in_words():
    full = event(45.0, done_bytes=int(1.2 * GIB), total_bytes=int(2.6 * GIB),
                 rate_bytes_per_s=38 * 1048576, eta_s=40)
    assert describe(full) == 'import scsi0 45 % (1.2 GiB of 2.6 GiB, 38 MiB/s, ~40 s left)'
    assert describe(event(45.9)) == 'import scsi0 45 %'
    assert describe(event(100.0, eta_s=0)) == 'import scsi0 100 %'
    assert describe(event(3.0, what=None, rate_bytes_per_s=0)) == 'copy 3 %'
    line = ProgressView('create web1').line(full)
    assert line == 'TASK [create web1] VM 100: import scsi0 45 % (1.2 GiB of 2.6 GiB, 38 MiB/s, ~40 s left)'
    assert ProgressView('get').line(event(5.0, vmid=None, what='download')) == 'TASK [get] pve1: download 5 %'


def test_human_units():
    assert human_bytes(512) == '512 B'
    assert human_bytes(1536) == '1.5 KiB'
    assert human_bytes(2 * GIB) == '2.0 GiB'
    assert human_rate(2.5 * 1048576) == '2.5 MiB/s'
    assert human_rate(120 * 1048576) == '120 MiB/s'
    assert human_left(40.4) == '~40 s left'
    assert human_left(119) == '~119 s left'
    assert human_left(300) == '~5 min left'


def test_default_verbosity_shows_the_start_then_each_ten_percent():
    view = ProgressView('vm')
    events = [(float(now), event(percent)) for now, percent in
              enumerate([1.0, 4.0, 9.0, 10.0, 12.0, 19.5, 31.0, 33.0, 61.0, 69.0, 99.0, 100.0])]
    assert shown(view, events) == [1.0, 10.0, 31.0, 61.0, 99.0, 100.0]


def test_default_verbosity_shows_a_slow_copy_every_thirty_seconds():
    view = ProgressView('vm')
    events = [(0.0, event(1.0)), (10.0, event(2.0)), (29.9, event(3.0)), (30.0, event(4.0)),
              (45.0, event(5.0)), (61.0, event(6.0))]
    assert shown(view, events) == [1.0, 4.0, 6.0]


def test_each_copy_is_followed_on_its_own():
    view = ProgressView('vm')
    events = [(0.0, event(50.0)), (1.0, event(55.0)), (2.0, event(3.0, copy=2)),
              (3.0, event(8.0, copy=2)), (4.0, event(5.0, upid=UPID.replace('100', '101'))),
              (5.0, event(57.0))]
    assert shown(view, events) == [50.0, 3.0, 5.0]


def test_verbose_shows_every_event():
    view = ProgressView('vm', verbosity=1)
    events = [(0.0, event(1.0)), (0.5, event(2.0)), (1.0, event(3.0))]
    assert shown(view, events) == [1.0, 2.0, 3.0]


def test_thresholds_are_parameters():
    view = ProgressView('vm', step=25, interval=1000)
    events = [(float(now), event(percent)) for now, percent in enumerate([0.0, 20.0, 26.0, 49.0, 50.0])]
    assert shown(view, events) == [0.0, 26.0, 50.0]


def main():
    """Runs every test here; exits non-zero naming the first that fails."""
    tests = [value for name, value in sorted(globals().items()) if name.startswith('test_')]
    for test in tests:
        test()
    sys.stdout.write('progress display: %d tests passed\n' % len(tests))


if __name__ == '__main__':
    main()
