# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Errors of the memory store (issue 6). One module, so callers catch one family.

The loop's policy (issue 6, "the store never loses data"): any :class:`MemoryStoreError`
is logged and memory is turned off for the rest of the run; nothing is retried silently and
nothing is emptied to make the error go away.
"""
from __future__ import annotations

from ansible_collections.scapforge.remediation.plugins.plugin_utils.errors import ScapforgeError


class MemoryStoreError(ScapforgeError):
    """The memory store could not do what was asked: lock not acquired in time (the message
    names the lock file), a file that cannot be read or written (permissions, disk full), a
    bad run id, a write through a read-only snapshot, a nested transaction."""

    kind = 'memory'


class MemoryLockBusy(MemoryStoreError):
    """The store's lock was not acquired in time: other hosts hold it (nothing is wrong with
    the store; a session keeps what it would have written and tries again)."""

    kind = 'memory_busy'


class MemoryCorrupt(MemoryStoreError):
    """A table file is not a whole, valid TinyDB JSON document (truncated, garbage, wrong
    shape).

    table: the table's name ("lessons", "meta", "attempts/<run_id>", ...).
    moved_to: absolute path the file was renamed to (``<file>.corrupt-<UTC>``), bytes intact;
      None when the file was found by a read-only snapshot, which moves nothing (the next
      transaction does).
    reason: what was wrong, one line (e.g. "invalid JSON: Unterminated string ... (char 4096)");
      prose for people, not a code: the code is ``kind`` (``memory_corrupt``).
    others: further ``(table, moved_to)`` pairs found corrupt in the same transaction (every
      corrupt table is moved aside at once, the first one is named by ``table``).
    """

    kind = 'memory_corrupt'

    def __init__(self, table: str, moved_to: str | None, reason: str,
                 others: tuple[tuple[str, str | None], ...] = ()):
        self.table = table
        self.moved_to = moved_to
        self.reason = reason
        self.others = tuple(others)
        where = ('moved aside to %s' % moved_to if moved_to
                 else 'left in place (read-only snapshot); the next transaction moves it aside')
        after = ('the store schema is unknown until meta.json is restored' if table == 'meta'
                 else 'the next transaction starts this table empty')
        msg = 'memory table %r is corrupt (%s); %s; %s' % (table, reason, where, after)
        if self.others:
            msg += '; also corrupt: ' + ', '.join(
                '%s -> %s' % (name, path or 'left in place') for name, path in self.others)
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.table, self.moved_to, self.reason, self.others))


class MemorySchemaError(MemoryStoreError):
    """The store's schema cannot be used by this code.

    found: the schema number in the store's meta.json (None when it is unknown: tables are
      present but meta.json is missing, e.g. after a corrupt meta.json was moved aside).
    supported: this code's ``SCHEMA_VERSION``.
    """

    kind = 'memory_schema'

    def __init__(self, found: int | None, supported: int, detail: str):
        self.found = found
        self.supported = supported
        self.detail = detail
        super().__init__('memory store schema %s, this code supports schema %d: %s' % (
            'unknown' if found is None else found, supported, detail))

    def __reduce__(self):
        return (type(self), (self.found, self.supported, self.detail))
