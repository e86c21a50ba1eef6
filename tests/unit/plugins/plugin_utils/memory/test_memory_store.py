# -*- coding: utf-8 -*-
"""The memory store (issue 6): atomic writes, the lock across real processes, corruption,
schema and migration. Real files and real processes (fork, like Ansible's workers); no mocks."""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import stat
import time

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.errors import (
    MemoryCorrupt, MemorySchemaError, MemoryStoreError)
from ansible_collections.scapforge.remediation.plugins.plugin_utils.memory.store import (
    SCHEMA_VERSION, MemoryStore)

CTX = multiprocessing.get_context('fork')


def _reap(procs) -> None:
    """Kill what a failed test left running (daemon processes, so pytest never waits)."""
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)


def _load(path) -> dict:
    with open(path, 'rb') as handle:
        return json.loads(handle.read())


def _tmp_files(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith('.') and n.endswith('.tmp')]


def test_layout_modes_and_refusals(tmp_path):
    store = MemoryStore(str(tmp_path / 'mem'))
    with store.snapshot() as view:  # a store that does not exist yet reads as empty
        assert view.lessons.all() == [] and view.attempt_runs() == []
    assert not (tmp_path / 'mem').exists()
    with store.transaction() as tx:
        tx.lessons.insert({'id': 'L1'})
        tx.attempts('run-1').insert({'rule': 'r', 'n': 1})
        lessons = tx.lessons
        with pytest.raises(MemoryStoreError, match='nested'):
            with store.transaction():
                pass
        with pytest.raises(MemoryStoreError, match='bad run id'):
            tx.attempts('../escape')
    root = tmp_path / 'mem'
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / 'attempts').stat().st_mode) == 0o700
    for f in ('lessons.json', 'meta.json', 'attempts/run-1.json'):
        assert stat.S_IMODE((root / f).stat().st_mode) == 0o600, f
    assert _load(root / 'lessons.json') == {'lessons': {'1': {'id': 'L1'}}}
    assert _load(root / 'attempts' / 'run-1.json') == {'attempts': {'1': {'rule': 'r', 'n': 1}}}
    assert _load(root / 'meta.json')['schema'] == SCHEMA_VERSION
    assert not (root / 'runs.json').exists()  # opening a table writes nothing
    with pytest.raises(MemoryStoreError, match='after its transaction ended'):
        lessons.insert({'id': 'L2'})
    with store.snapshot() as view:
        assert view.lessons.all() == [{'id': 'L1'}]
        assert view.attempt_runs() == ['run-1']
        with pytest.raises(MemoryStoreError, match='read-only'):
            view.lessons.insert({'id': 'L3'})
    assert _load(root / 'lessons.json') == {'lessons': {'1': {'id': 'L1'}}}


def _insert_worker(path, proc, barrier):
    store = MemoryStore(path)
    barrier.wait()
    for n in range(50):
        with store.transaction() as tx:
            tx.evidence.insert({'proc': proc, 'n': n, 'pid': os.getpid()})


def test_sixteen_processes_lose_nothing(tmp_path):
    path = str(tmp_path / 'mem')
    barrier = CTX.Barrier(16)
    procs = [CTX.Process(target=_insert_worker, args=(path, i, barrier), daemon=True)
             for i in range(16)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    finally:
        _reap(procs)
    assert [p.exitcode for p in procs] == [0] * 16
    data = _load(os.path.join(path, 'evidence.json'))['evidence']
    assert len(data) == 800
    assert len(set(data)) == 800  # document ids distinct
    assert {(d['proc'], d['n']) for d in data.values()} == {(i, n) for i in range(16)
                                                            for n in range(50)}
    assert len({d['pid'] for d in data.values()}) == 16
    with MemoryStore(path).transaction() as tx:
        assert len(tx.evidence) == 800
    assert _tmp_files(path) == []


ROWS = 10000


def _gen_writer(path, committed, started):
    store = MemoryStore(path)
    while True:
        with store.transaction() as tx:
            gen = tx.lessons.get(doc_id=1)['gen'] + 1
            started.set()
            tx.lessons.update({'gen': gen})  # one write: the whole file, every row
        committed.value = gen


def test_sigkill_mid_write_leaves_old_or_new(tmp_path):
    """20 writers killed with SIGKILL: odd rounds after a random delay (0-200 ms) during which
    this process reads the table without the lock; even rounds 0-1 ms after the writer's temp
    file appears, so some kills surely land inside a write."""
    path = str(tmp_path / 'mem')
    table = os.path.join(path, 'lessons.json')
    store = MemoryStore(path)
    with store.transaction() as tx:
        tx.lessons.insert_multiple({'i': i, 'gen': 0, 'pad': 'x' * 60} for i in range(ROWS))
    rng = random.Random(6)
    killed_mid_write = reads = 0
    for round_ in range(20):
        with store.transaction() as tx:
            before = tx.lessons.get(doc_id=1)['gen']
        committed, started = CTX.Value('q', before, lock=False), CTX.Event()
        writer = CTX.Process(target=_gen_writer, args=(path, committed, started), daemon=True)
        writer.start()
        try:
            assert started.wait(20)
            if round_ % 2:
                deadline = time.monotonic() + rng.uniform(0.0, 0.2)
                while time.monotonic() < deadline:  # a reader without the lock: whole files
                    gens = {d['gen'] for d in _load(table)['lessons'].values()}
                    assert len(gens) == 1
                    reads += 1
            else:
                deadline = time.monotonic() + 10
                while not _tmp_files(path) and time.monotonic() < deadline:
                    pass
                time.sleep(rng.uniform(0.0, 0.001))
            os.kill(writer.pid, signal.SIGKILL)
            writer.join(10)
        finally:
            _reap([writer])
        assert writer.exitcode == -signal.SIGKILL
        killed_mid_write += bool(_tmp_files(path))
        last = committed.value
        with store.transaction() as tx:  # opens: no MemoryCorrupt, no partial file
            rows = tx.lessons.all()
        assert len(rows) == ROWS
        gens = {d['gen'] for d in rows}
        assert len(gens) == 1
        assert gens.pop() in (last, last + 1)  # old or new content, nothing else
        assert _tmp_files(path) == []  # the transaction removed the dead writer's temp file
    assert killed_mid_write >= 3, 'kills inside a write: %d of 20' % killed_mid_write
    assert reads > 0
    assert not [n for n in os.listdir(path) if '.corrupt-' in n]


def test_truncated_table_is_moved_aside_and_named(tmp_path):
    path = str(tmp_path / 'mem')
    store = MemoryStore(path)
    with store.transaction() as tx:
        tx.lessons.insert_multiple({'id': 'L%d' % i, 'cue': 'c' * 200} for i in range(5))
        tx.runs.insert({'run_id': 'r1'})
    table = os.path.join(path, 'lessons.json')
    with open(table, 'rb') as handle:
        whole = handle.read()
    with open(table, 'r+b') as handle:
        handle.truncate(len(whole) // 2)
    truncated = whole[:len(whole) // 2]

    with pytest.raises(MemoryCorrupt) as caught:  # a snapshot reports and moves nothing
        with store.snapshot():
            pass
    assert caught.value.table == 'lessons' and caught.value.moved_to is None
    assert os.path.exists(table)

    ran = False
    with pytest.raises(MemoryCorrupt) as caught:
        with store.transaction():
            ran = True
    assert not ran  # the body never runs on an empty stand-in
    err = caught.value
    assert err.table == 'lessons'
    assert os.path.basename(err.moved_to).startswith('lessons.json.corrupt-')
    assert os.path.dirname(err.moved_to) == path
    assert 'lessons' in str(err) and err.moved_to in str(err) and 'invalid JSON' in str(err)
    assert isinstance(err, MemoryStoreError)
    with open(err.moved_to, 'rb') as handle:
        assert handle.read() == truncated  # bytes intact, never deleted
    assert not os.path.exists(table)

    with store.transaction() as tx:
        assert tx.lessons.all() == []
        assert tx.runs.all() == [{'run_id': 'r1'}]
        assert tx.lessons.insert({'id': 'L9'}) == 1
    assert _load(table) == {'lessons': {'1': {'id': 'L9'}}}
    assert os.path.exists(err.moved_to)


def test_corrupt_attempts_and_meta(tmp_path):
    path = str(tmp_path / 'mem')
    store = MemoryStore(path)
    with store.transaction() as tx:
        tx.attempts('run-7').insert({'n': 1})
        tx.lessons.insert({'id': 'L1'})
    with open(os.path.join(path, 'attempts', 'run-7.json'), 'w') as handle:
        handle.write('["not", "a", "table"]')
    with store.transaction() as tx:
        with pytest.raises(MemoryCorrupt) as caught:
            tx.attempts('run-7')
        assert caught.value.table == 'attempts/run-7'
        assert 'not an object' in caught.value.reason
        assert tx.attempts('run-8').all() == []
    with store.transaction() as tx:
        assert tx.attempts('run-7').all() == []

    with open(os.path.join(path, 'meta.json'), 'w') as handle:
        handle.write('{"schema": ')
    with pytest.raises(MemoryCorrupt) as caught:
        with store.transaction():
            pass
    assert caught.value.table == 'meta'
    # Without meta.json the version of the tables is unknown: refuse rather than guess.
    with pytest.raises(MemorySchemaError) as schema:
        with store.transaction():
            pass
    assert schema.value.found is None
    assert os.path.basename(caught.value.moved_to) in str(schema.value)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / 'mem'
    path.mkdir()
    meta = '{"schema": 99, "created": "2030-01-01T00:00:00Z"}'
    (path / 'meta.json').write_text(meta)
    (path / 'lessons.json').write_text('{"lessons": {"1": {"id": "L1"}}}')
    store = MemoryStore(str(path))
    for opener in (store.transaction, store.snapshot):
        with pytest.raises(MemorySchemaError) as caught:
            with opener():
                pass
        assert (caught.value.found, caught.value.supported) == (99, SCHEMA_VERSION)
        assert 'schema 99' in str(caught.value) and 'supports schema %d' % SCHEMA_VERSION in str(
            caught.value)
    assert (path / 'meta.json').read_text() == meta
    assert not [n for n in os.listdir(path) if n.startswith('backup-')]


def test_migration_from_v0_with_backup(tmp_path):
    """A v0 store: lessons had no "status". Observed evidence -> confirmed, Reflector-only ->
    candidate, an existing status kept."""
    path = tmp_path / 'mem'
    (path / 'attempts').mkdir(parents=True)
    files = {
        'meta.json': {'schema': 0, 'created': '2026-01-01T00:00:00Z'},
        'lessons.json': {'lessons': {
            '1': {'id': 'L1', 'kind': 'caution', 'cue': 'nspawn', 'action': 'classify'},
            '2': {'id': 'L2', 'kind': 'positive', 'cue': 'reflector said', 'action': 'try x'},
            '3': {'id': 'L3', 'kind': 'negative', 'cue': 'c', 'action': 'a', 'status': 'retired'},
        }},
        'evidence.json': {'evidence': {
            '1': {'lesson': 'L1', 'source_kind': 'outcome', 'source_id': 'r0/lab1/rule_a'},
            '2': {'lesson': 'L2', 'source_kind': 'reflection', 'source_id': 'r0/lab1/rule_b/1'},
            '3': {'lesson': 'L3', 'source_kind': 'attempt', 'source_id': 'r0/lab1/rule_c/1'},
        }},
        'attempts/r0.json': {'attempts': {'1': {'rule': 'rule_c', 'verdict': 'failed'}}},
    }
    originals = {}
    for rel, content in files.items():
        originals[rel] = json.dumps(content).encode()
        (path / rel).write_bytes(originals[rel])

    store = MemoryStore(str(path))
    with store.transaction() as tx:
        status = {d['id']: d['status'] for d in tx.lessons.all()}
        assert tx.attempts('r0').all() == [{'rule': 'rule_c', 'verdict': 'failed'}]
    assert status == {'L1': 'confirmed', 'L2': 'candidate', 'L3': 'retired'}
    meta = _load(path / 'meta.json')
    assert meta['schema'] == SCHEMA_VERSION == 1
    assert meta['created'] == '2026-01-01T00:00:00Z'
    backups = [n for n in os.listdir(path) if n.startswith('backup-')]
    assert len(backups) == 1 and backups[0].startswith('backup-0-')
    assert [(m['from'], m['to'], os.path.basename(m['backup'])) for m in meta['migrations']] == [
        (0, 1, backups[0])]
    for rel, raw in originals.items():
        assert (path / backups[0] / rel).read_bytes() == raw, rel
    assert stat.S_IMODE((path / backups[0]).stat().st_mode) == 0o700
    with store.transaction():  # already migrated: no second backup
        pass
    assert len([n for n in os.listdir(path) if n.startswith('backup-')]) == 1


def _lock_holder(path, held, release):
    with MemoryStore(path).transaction():
        held.set()
        release.wait(30)


def test_lock_timeout_names_the_lock_file(tmp_path):
    path = str(tmp_path / 'mem')
    held, release = CTX.Event(), CTX.Event()
    holder = CTX.Process(target=_lock_holder, args=(path, held, release), daemon=True)
    holder.start()
    try:
        assert held.wait(20)
        store = MemoryStore(path, lock_timeout=0.3)
        start = time.monotonic()
        with pytest.raises(MemoryStoreError) as caught:
            with store.transaction():
                pass
        waited = time.monotonic() - start
        assert os.path.join(path, '.lock') in str(caught.value)
        assert '0.3 s' in str(caught.value)
        assert 0.3 <= waited < 5
    finally:
        release.set()
        holder.join(20)
        _reap([holder])
    assert holder.exitcode == 0
    with store.transaction(timeout=5) as tx:
        assert tx.runs.all() == []


def test_a_table_is_parsed_once_per_write_and_each_read_gets_its_own_documents(tmp_path, monkeypatch):
    """Issue 19 item 7: a transaction parses a table file once (and once after each of its
    writes), not once per TinyDB call; each call still gets documents of its own."""
    path = str(tmp_path / 'mem')
    store = MemoryStore(path)
    with store.transaction() as tx:
        tx.lessons.insert_multiple([{'id': 'L%d' % i, 'scope': {'rule': 'r%d' % i}, 'weight': 0.5} for i in range(3)])
    parses = []
    real_loads = json.loads

    def loads(raw, *args, **kwargs):
        if (raw if isinstance(raw, str) else raw.decode('ascii')).startswith('{"lessons"'):
            parses.append(1)
        return real_loads(raw, *args, **kwargs)
    monkeypatch.setattr(json, 'loads', loads)
    with store.transaction() as tx:
        first = tx.lessons.all()
        first[0]['weight'] = 9.0  # a top-level change without a write stays in this document
        assert [d['weight'] for d in tx.lessons.all()] == [0.5, 0.5, 0.5]
        assert len(tx.lessons.search(lambda d: True)) == 3 and tx.lessons.get(doc_id=2)['id'] == 'L1'
        assert len(parses) == 1  # one parse for every call
        with pytest.raises(ValueError):  # an update that fails half way leaves nothing behind
            tx.lessons.insert_multiple([{'id': 'L3'}, 'not a document'])
        assert [d['id'] for d in tx.lessons.all()] == ['L0', 'L1', 'L2']
        tx.lessons.update({'weight': 0.6}, doc_ids=[1])
        assert tx.lessons.get(doc_id=1)['weight'] == 0.6 and len(parses) == 2  # the bytes written, parsed once
        assert tx.lessons.get(doc_id=1)['weight'] == 0.6 and len(parses) == 2
    monkeypatch.setattr(json, 'loads', real_loads)
    assert [d['weight'] for d in _load(os.path.join(path, 'lessons.json'))['lessons'].values()] == [0.6, 0.5, 0.5]
