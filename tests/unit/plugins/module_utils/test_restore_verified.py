"""What makes a restore ``verified`` (issue 16, bug class: a restore always claiming
"verified"), end to end without a host: checkpoint_store's real save, restore and verify on a
temporary directory; the files provider reading the module's result (the module's own
``run_state``, called here without AnsibleModule); AttemptRunner.roll_back setting the
attempt's ``rolled_back`` from it.

A restore is verified only when every saved path was put back AND re-reading it after the
restore finds no difference; a restore that could not write a file back, or one only planned
(check mode), is not.
"""

import hashlib
import os
import time
import types

import pytest

from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_store as core
from ansible_collections.scapforge.remediation.plugins.modules import checkpoint as module
from ansible_collections.scapforge.remediation.plugins.plugin_utils import attempts as A
from ansible_collections.scapforge.remediation.plugins.plugin_utils.attempt_runner import AttemptRunner
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import FilesProvider
from ansible_collections.scapforge.remediation.plugins.plugin_utils.events import EventLog, read_events

SAVE = dict(shallow=[], fresh=False, link_targets=True, max_file_bytes=1 << 20, max_total_bytes=1 << 22,
            max_entries=100)
#: the module's defaults (plugins/modules/checkpoint.py argument_spec) for the states used here
DEFAULTS = dict(SAVE, paths=[], discard_after=True)


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def save(root, cid, paths):
    store = core.Store(str(root), cid)
    try:
        return core.do_save(store, dict(SAVE, paths=[str(p) for p in paths]), core.read_mounts(), False)
    finally:
        store.close()


def restore(root, cid, check_mode=False, discard_after=False):
    store = core.Store(str(root), cid)
    try:
        return core.do_restore(store, {"discard_after": discard_after}, core.read_mounts(), check_mode)
    finally:
        store.close()


@pytest.fixture
def saved(tmp_path):
    """/etc/a.conf saved with "A=1", then changed to "A=2" by a fix."""
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "a.conf"
    conf.write_text("A=1\n")
    conf.chmod(0o644)
    save(tmp_path / "ckpt", "c-1", [conf])
    conf.write_text("A=2\n")
    return tmp_path, conf


# ---------------------------------------------------------------- checkpoint_store

def test_a_clean_restore_is_verified_and_discarded(saved):
    tmp_path, conf = saved
    done = restore(tmp_path / "ckpt", "c-1", discard_after=True)
    assert (done["verified"], done["mismatches"], done["restored"], done["removed"]) == (True, [], [str(conf)], [])
    assert (done["changed"], done["discarded"], done["exists"]) == (True, True, False)
    assert conf.read_text() == "A=1\n" and not (tmp_path / "ckpt" / "c-1").exists()


def test_a_restore_that_cannot_put_a_file_back_is_not_verified(saved):
    """Bug class: a restore always claiming "verified". The saved copy is corrupt, so the file
    stays as the fix left it: verified False, the failure and the difference both named, and
    the checkpoint is kept (not discarded) for a human."""
    tmp_path, conf = saved
    blob = tmp_path / "ckpt" / "c-1" / "blobs" / sha("A=1\n")
    blob.write_text("tampered\n")
    done = restore(tmp_path / "ckpt", "c-1", discard_after=True)
    assert done["verified"] is False
    assert done["mismatches"] == [
        "%s: restore failed: [Errno 5] saved copy %s is corrupt (sha256 %s)" % (conf, blob, sha("tampered\n")[:12]),
        "%s: sha256 %s != saved %s" % (conf, sha("A=2\n")[:12], sha("A=1\n")[:12]),
    ]
    assert (done["restored"], done["discarded"], done["exists"]) == ([], False, True)
    assert conf.read_text() == "A=2\n" and (tmp_path / "ckpt" / "c-1" / "manifest.json").is_file()


def test_a_restore_with_its_saved_copy_gone_is_not_verified(saved):
    """Bug class: a restore always claiming "verified" (the saved copy was deleted)."""
    tmp_path, conf = saved
    blob = tmp_path / "ckpt" / "c-1" / "blobs" / sha("A=1\n")
    blob.unlink()
    done = restore(tmp_path / "ckpt", "c-1")
    assert done["verified"] is False and len(done["mismatches"]) == 2
    assert done["mismatches"][0] == "%s: restore failed: [Errno 2] saved copy %s is missing: No such file or " \
                                    "directory" % (conf, blob)


def test_a_planned_restore_is_not_verified(saved):
    """Bug class: a restore always claiming "verified" (check mode plans the restore and
    changes nothing: what differs is still there)."""
    tmp_path, conf = saved
    done = restore(tmp_path / "ckpt", "c-1", check_mode=True, discard_after=True)
    assert done["verified"] is False and done["restored"] == [str(conf)]
    assert done["mismatches"] == ["%s: sha256 %s != saved %s" % (conf, sha("A=2\n")[:12], sha("A=1\n")[:12])]
    assert conf.read_text() == "A=2\n" and done["discarded"] is False


def test_verify_names_every_difference(saved):
    tmp_path, conf = saved
    conf.write_text("A=1\n")
    conf.chmod(0o600)
    (conf.parent / "new.conf").write_text("x")
    store = core.Store(str(tmp_path / "ckpt"), "c-1")
    try:
        store.load()
        assert core.verify(store, core.read_mounts()) == ["%s: mode 0600 != saved 0644" % conf]
    finally:
        store.close()
    save(tmp_path / "ckpt2", "d-1", [conf.parent])
    (conf.parent / "newer.conf").write_text("y")
    store = core.Store(str(tmp_path / "ckpt2"), "d-1")
    try:
        store.load()
        assert core.verify(store, core.read_mounts()) == ["%s: unexpected entry newer.conf" % conf.parent]
    finally:
        store.close()
    done = restore(tmp_path / "ckpt2", "d-1")
    assert done["verified"] is True and done["removed"] == [str(conf.parent / "newer.conf")]


# ---------------------------------------------------------------- the files provider and the rollback

class LocalFiles(FilesProvider):
    """The files provider with the module's own ``run_state`` run here instead of over a
    connection: the plugin reads exactly what the module returns."""

    def __init__(self, root, canned=None):
        super().__init__(types.SimpleNamespace(check_mode=False), {}, root=str(root))
        self.canned = canned

    def run_module(self, args):
        if self.canned is not None and args["state"] == "restore":
            return dict(self.canned), 0.0
        params = dict(DEFAULTS, **args)
        store = core.Store(os.path.normpath(self.root), params["id"])
        started = time.monotonic()
        try:
            result = module.run_state(store, params, False)
        finally:
            store.close()
        result.update(id=params["id"], checkpoint_dir=os.path.join(self.root, params["id"]))
        return result, round(time.monotonic() - started, 3)


def _runner(tmp_path):
    events = EventLog(str(tmp_path / "events.jsonl"), "web1")
    return AttemptRunner(None, {}, None, None, None, events, None, False, lambda detail: None), events


def _failed_attempt(runner, checkpoint):
    item = A.WorkItem("xccdf_org.ssgproject.content_rule_a")
    attempt = item.new_attempt(A.WORKER)
    attempt.verdict, attempt.reason = A.INEFFECTIVE, "fix_ineffective"
    attempt.checkpoint = {"covered": list(checkpoint.covered)}
    runner._checkpoints[(item.rule, attempt.number)] = checkpoint
    return item, attempt


def test_roll_back_is_verified_only_when_the_restore_is(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    conf = etc / "a.conf"
    conf.write_text("A=1\n")
    runner, events = _runner(tmp_path)
    checkpoint = LocalFiles(tmp_path / "ckpt").open("good-1")
    checkpoint.cover([str(conf)])
    conf.write_text("A=2\n")
    item, attempt = _failed_attempt(runner, checkpoint)
    assert A.needs_rollback(attempt) is True
    assert runner.roll_back(item, attempt) is True
    assert attempt.rolled_back is True and attempt.restore["verified"] is True and conf.read_text() == "A=1\n"
    assert A.needs_rollback(attempt) is False

    bad = LocalFiles(tmp_path / "ckpt").open("bad-1")
    bad.cover([str(conf)])
    conf.write_text("A=3\n")
    (tmp_path / "ckpt" / "bad-1" / "blobs" / sha("A=1\n")).write_text("tampered\n")
    item, attempt = _failed_attempt(runner, bad)
    assert runner.roll_back(item, attempt) is False
    assert attempt.rolled_back is False and attempt.restore["verified"] is False
    assert attempt.restore["detail"] == "restored 0, removed 0; 2 mismatch(es), checkpoint kept at %s" \
        % (tmp_path / "ckpt" / "bad-1")
    assert attempt.restore["mismatches"][0].startswith("%s: restore failed: [Errno 5] saved copy" % conf)
    assert attempt.detail == "ROLLBACK NOT VERIFIED: " + attempt.restore["detail"]
    assert conf.read_text() == "A=3\n"
    assert [e["data"]["verified"] for e in read_events(str(tmp_path / "events.jsonl")) if e["event"] == "restore"] \
        == [True, False]


def test_a_module_saying_verified_with_mismatches_is_not_believed(tmp_path):
    """Bug class: a restore always claiming "verified": the plugin does not take the module's
    word when it also reports a difference."""
    canned = {"verified": True, "mismatches": ["/etc/a: mode 0600 != saved 0644"], "restored": ["/etc/a"],
              "checkpoint_dir": "/x/c-1"}
    provider = LocalFiles(tmp_path / "ckpt", canned=canned)
    (tmp_path / "a").write_text("a")
    checkpoint = provider.open("c-1")
    checkpoint.cover([str(tmp_path / "a")])
    result = checkpoint.restore()
    assert result.verified is False and result.mismatches == ["/etc/a: mode 0600 != saved 0644"]
    assert result.detail.startswith("restored 1, removed 0; 1 mismatch(es), checkpoint kept at /x/c-1")
    runner, _events = _runner(tmp_path)
    item, attempt = _failed_attempt(runner, checkpoint)
    assert runner.roll_back(item, attempt) is False and attempt.rolled_back is False


def test_without_a_checkpoint_nothing_is_rolled_back(tmp_path):
    runner, _events = _runner(tmp_path)
    item = A.WorkItem("r")
    attempt = item.new_attempt(A.WORKER)
    assert runner.roll_back(item, attempt) is False and attempt.rolled_back is None
