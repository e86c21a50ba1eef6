"""Checkpoint providers and the target-side store, without a lab host.

- The provider plumbing of plugins/plugin_utils/checkpoint.py: make_provider's options, the
  ``command`` provider (its commands really run, through a local stand-in for the action's
  ``_low_level_execute_command``: /bin/sh on this machine, in a temporary directory), the
  ``lab`` provider's argv and verification, DeadmanState from the module's ``deadman``.
- The target-side code (plugins/module_utils/checkpoint_store.py, checkpoint_deadman.py)
  run here on real files in a temporary directory: extended attributes (POSIX ACLs as the
  raw system.posix_acl_access value, user.*, trusted.*, security.selinux), the fired
  restore, and the ``sleep`` dead-man switch (this machine runs no systemd) armed, fired and
  disarmed for real (short timeouts, its own process only).
The same on a lab host over SSH: tests/integration/test_deadman.py and test_checkpoint.py.
"""
import json
import os
import struct
import subprocess
import sys
import time
import types

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils._host.session import ActionSession
from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_deadman as deadman
from ansible_collections.scapforge.remediation.plugins.module_utils import checkpoint_store as core
from ansible_collections.scapforge.remediation.plugins.plugin_utils.checkpoint import (
    COLLECTION_ROOT, PROVIDERS, CheckpointError, CommandProvider, DeadmanState, FilesProvider, provider_class,
    RestoreResult, fired_restore_result, make_provider)

LabProvider = provider_class("lab")  # loaded by name from the checkout's lab/

NOBODY_ACL = [(0x01, 6, 0xFFFFFFFF), (0x02, 4, 65534), (0x04, 4, 0xFFFFFFFF), (0x10, 4, 0xFFFFFFFF),
              (0x20, 0, 0xFFFFFFFF)]
NOBODY_ACL_TEXT = "user::rw-,user:65534:r--,group::r--,mask::r--,other::---"


def acl_bytes(entries):
    """A POSIX ACL xattr value (include/uapi/linux/posix_acl_xattr.h, version 2)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


# ---------------------------------------------------------------- stand-ins for the action plugin

class LocalAction:
    """Runs ``_low_level_execute_command`` with /bin/sh on this machine (no connection, no
    become): the provider's commands run for real, here."""

    def __init__(self, check_mode=False):
        self._task = types.SimpleNamespace(check_mode=check_mode)
        self._connection = types.SimpleNamespace(reset=lambda: setattr(self, "reset_called", True))
        self.commands = []
        self.reset_called = False

    def _low_level_execute_command(self, cmd, sudoable=True):
        self.commands.append((cmd, sudoable))
        proc = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60, check=False)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


# ---------------------------------------------------------------- make_provider

def test_providers_are_picked_by_name_with_their_options():
    assert sorted(PROVIDERS) == ["command", "files"]  # the lab's is loaded from lab/ (below)
    files = make_provider("files", None, {}, {"root": "/srv/ckpt", "max_file_bytes": 1024})
    assert isinstance(files, FilesProvider) and files.root == "/srv/ckpt" and files.options == {"max_file_bytes": 1024}
    command = make_provider("command", None, {}, {"snapshot": "a", "restore": "b", "verify": "c", "timeout": 30})
    assert isinstance(command, CommandProvider) and command.timeout == 30 and command.become is True
    lab = make_provider("lab", None, {}, {})
    assert isinstance(lab, LabProvider) and lab.restore_command == "{python} lab/lab.py reset {host}"
    assert os.path.isfile(os.path.join(COLLECTION_ROOT, "lab", "lab.py"))  # the default cwd holds lab.py


@pytest.mark.parametrize("name, options, message", [
    ("zfs", {}, "unknown checkpoint provider 'zfs' (known: command, files, lab)"),
    ("files", {"snapshot": "x"}, "checkpoint provider files: unknown option(s) snapshot (known: root, max_file_bytes, "
                                 "max_total_bytes, max_entries, link_targets)"),
    ("command", {"snapshot": "a", "restore": "b"}, "the command checkpoint provider needs option 'verify' "
                                                   "(a command line)"),
    ("command", {"snapshot": "a", "restore": "  ", "verify": "c"}, "the command checkpoint provider needs option "
                                                                   "'restore' (a command line)"),
    ("command", {"snapshot": "a", "restore": "b", "verify": "c", "timeout": 0},
     "the command checkpoint provider: timeout must be a positive number of seconds"),
    ("lab", {"restore_command": ""}, "the lab checkpoint provider needs option 'restore_command' (a command line)"),
])
def test_bad_provider_options_are_refused_with_the_reason(name, options, message):
    with pytest.raises(CheckpointError) as err:
        make_provider(name, None, {}, options)
    assert str(err.value) == message and err.value.kind == "bad_options"


def test_only_files_has_a_deadman_switch_and_whole_host_is_said():
    cp = make_provider("command", ActionSession(LocalAction(), {}), {}, {"snapshot": "a", "restore": "b", "verify": "c"}).open("x-1")
    assert cp.whole_host is True and cp.supports_deadman is False
    for call in (lambda: cp.arm(30), cp.disarm, cp.deadman_status):
        with pytest.raises(CheckpointError) as err:
            call()
        assert err.value.kind == "unsupported" and "command checkpoint provider has no dead-man switch" in str(err.value)
    files = FilesProvider(None, {}).open("x-1")
    assert files.whole_host is False and files.supports_deadman is True
    assert files.disarm().to_dict()["detail"] == "no dead-man switch was armed"   # nothing ran: never saved


# ---------------------------------------------------------------- the command provider, commands run for real

def _tar_provider(tmp_path, verify=None, **extra):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.conf").write_text("A=1\n")
    (data / "sub").mkdir()
    (data / "sub" / "b.conf").write_text("B=2\n")
    base = str(tmp_path)
    options = {
        "snapshot": "tar -C %s -cf %s/snap-{id}.tar data && cd %s && find data -type f | sort | xargs sha256sum "
                    "> %s/snap-{id}.sums && echo snapshot of {host} taken" % (base, base, base, base),
        "restore": "rm -rf %s/data && tar -C %s -xf %s/snap-{id}.tar" % (base, base, base),
        "verify": verify or ("cd %s && sha256sum --quiet -c snap-{id}.sums && "
                             "[ \"$(find data -type f | wc -l)\" = \"$(wc -l < snap-{id}.sums)\" ]" % base),
        "discard": "rm -f %s/snap-{id}.tar %s/snap-{id}.sums" % (base, base),
    }
    options.update(extra)
    action = LocalAction()
    return action, make_provider("command", ActionSession(action, {}), {"inventory_hostname": "web1"}, options), data


def test_command_provider_tar_round_trip(tmp_path):
    action, provider, data = _tar_provider(tmp_path)
    cp = provider.open("run1-rule_x-1")
    assert cp.cover(["/etc/a.conf", "/etc//b"]) == ["/etc/a.conf", "/etc/b"]
    assert cp.cover(["/etc/a.conf", "/etc/c"]) == ["/etc/c"]          # one snapshot only
    assert [c["what"] for c in cp.calls] == ["snapshot"]
    assert cp.calls[0]["output"] == "snapshot of web1 taken" and cp.calls[0]["rc"] == 0
    assert (tmp_path / "snap-run1-rule_x-1.tar").is_file()
    assert action.commands[0][0].startswith("timeout -k 10 600 /bin/sh -c ") and action.commands[0][1] is True

    (data / "a.conf").write_text("A=2\n")
    (data / "sub" / "b.conf").unlink()
    (data / "new.conf").write_text("N\n")
    result = cp.restore()
    assert result.verified is True and result.mismatches == []
    assert result.restored == ["/etc/a.conf", "/etc/b", "/etc/c"] and result.removed == []
    assert result.detail == "snapshot restored by command (exit 0); verify exited 0"
    assert (data / "a.conf").read_text() == "A=1\n" and (data / "sub" / "b.conf").read_text() == "B=2\n"
    assert not (data / "new.conf").exists()
    cp.discard()   # a verified restore closes it: the discard command is not run
    assert [c["what"] for c in cp.calls] == ["snapshot", "restore", "verify"]
    with pytest.raises(CheckpointError) as err:
        cp.cover(["/etc/x"])
    assert err.value.kind == "closed"


def test_command_provider_unverified_restore_names_the_verify_output(tmp_path):
    long_line = "x" * 1000
    _action, provider, data = _tar_provider(tmp_path, verify="echo %s; echo volume differs >&2; exit 3" % long_line)
    cp = provider.open("c-2")
    cp.cover(["/etc/a.conf"])
    (data / "a.conf").write_text("changed\n")
    result = cp.restore()
    assert result.verified is False and result.restored == []
    assert len(result.mismatches) == 1
    line = result.mismatches[0]
    assert line.startswith("verify command exited 3: ...") and line.endswith("x\nvolume differs")
    assert len(line) == len("verify command exited 3: ") + 403     # output trimmed to its last 400 characters
    assert (data / "a.conf").read_text() == "A=1\n"               # the restore itself ran


def test_command_provider_failed_snapshot_stops_the_change_and_discard_runs(tmp_path):
    _action, provider, _data = _tar_provider(tmp_path, snapshot="echo no space left on vg0 >&2; exit 5")
    cp = provider.open("c-3")
    with pytest.raises(CheckpointError) as err:
        cp.cover(["/etc/a.conf"])
    assert err.value.kind == "snapshot_failed"
    assert str(err.value) == "checkpoint c-3: the snapshot command exited 5: no space left on vg0"
    assert cp.restore().to_dict() == {"verified": True, "restored": [], "removed": [], "mismatches": [],
                                      "seconds": 0.0, "detail": "no snapshot was taken (nothing changed), "
                                                                "nothing to restore"}

    second = tmp_path / "second"
    second.mkdir()
    _action, provider, _data = _tar_provider(second)
    cp = provider.open("c-4")
    cp.cover(["/etc/a.conf"])
    assert (tmp_path / "second" / "snap-c-4.tar").is_file()
    cp.discard()                                                   # the attempt is kept: drop the snapshot
    assert not (tmp_path / "second" / "snap-c-4.tar").exists()
    assert [c["what"] for c in cp.calls] == ["snapshot", "discard"]


def test_command_provider_timeout_kills_a_hanging_command(tmp_path):
    _action, provider, _data = _tar_provider(tmp_path, restore="sleep 30", timeout=1)
    cp = provider.open("c-5")
    cp.cover(["/etc/a.conf"])
    started = time.monotonic()
    result = cp.restore()
    assert time.monotonic() - started < 15
    assert result.verified is False
    assert result.mismatches == ["restore command exited 124: killed after 1 s; "]


def test_command_provider_check_mode_runs_nothing(tmp_path):
    action = LocalAction(check_mode=True)
    provider = make_provider("command", ActionSession(action, {}), {},
                             {"snapshot": "touch %s/s" % tmp_path, "restore": "false", "verify": "false"})
    cp = provider.open("c-6")
    assert cp.cover(["/etc/a"]) == ["/etc/a"]
    assert cp.restore().verified is True and action.commands == [] and not (tmp_path / "s").exists()


# ---------------------------------------------------------------- the lab provider

def test_lab_provider_runs_its_command_on_the_controller_then_verifies(tmp_path):
    checks = []

    def verify(action):
        checks.append(action)
        return types.SimpleNamespace(healthy=True, detail="fresh login and sudo ok")

    marker = tmp_path / "reset.txt"
    action = LocalAction()
    provider = make_provider("lab", ActionSession(action, {}), {"inventory_hostname": "lab3"},
                             {"restore_command": "{python} -c 'import sys; open(sys.argv[1], \"w\").write("
                                                 "\" \".join(sys.argv[2:]))' %s {host} {id}" % marker,
                              "cwd": str(tmp_path)})
    provider.verify = verify
    cp = provider.open("lab-1")
    assert cp.restore().detail == "nothing was covered (nothing changed), nothing to restore"
    cp.cover(["/etc/issue"])
    result = cp.restore()
    assert marker.read_text() == "lab3 lab-1"
    assert result.verified is True and result.restored == ["/etc/issue"]
    assert result.detail.endswith("(exit 0); fresh login and sudo ok")
    assert [c.action for c in checks] == [action] and action.reset_called is True     # the dead persistent connection was reset
    assert cp.calls[0]["argv"][0] == sys.executable and action.commands == []   # nothing ran on the target


def test_lab_provider_default_command_and_failures(tmp_path):
    provider = LabProvider(ActionSession(LocalAction(), {}), {"inventory_hostname": "lab3"},
                           verify=lambda action: types.SimpleNamespace(healthy=False, detail="fresh login + become "
                                                                       "exited 1: a password is required"))
    assert provider.argv(provider.restore_command, "x-1") == [sys.executable, "lab/lab.py", "reset", "lab3"]
    provider.restore_command = "{python} -c 'raise SystemExit(0)'"
    cp = provider.open("x-1")
    cp.cover(["/etc/issue"])
    result = cp.restore()
    assert result.verified is False
    assert result.mismatches == ["after the reset: fresh login + become exited 1: a password is required"]

    provider.restore_command = "{python} -c 'import sys; sys.stderr.write(\"no such host lab3\"); sys.exit(1)'"
    cp = provider.open("x-2")
    cp.cover(["/etc/issue"])
    assert cp.restore().mismatches == ["restore command exited 1: no such host lab3"]


# ---------------------------------------------------------------- DeadmanState from the module's answer

FIRED = {"fired_at": 1796047083.6, "finished": 1796047083.62, "seconds": 0.015, "verified": True, "mismatches": [],
         "restored": ["/etc/sudoers.d/scapforge"], "removed": [], "error": None, "lock_acquired": True,
         "method": "systemd", "post_restore": [{"command": "systemctl reload ssh", "rc": 0, "output": ""}]}


def test_deadman_state_from_the_module():
    armed = DeadmanState.from_module({"was_armed": True, "armed": True, "method": "systemd",
                                      "unit": "scapforge-deadman-r-1", "fires_in": 19.6, "timeout": 20}, 1.25)
    assert (armed.armed, armed.fired, armed.seconds) == (True, False, 1.25)
    assert armed.detail == "dead-man switch armed: systemd timer scapforge-deadman-r-1.timer fires in 20 s"
    fired = DeadmanState.from_module({"was_armed": True, "fired": True, "method": "systemd", "result": FIRED}, 0.5)
    assert fired.result == RestoreResult(True, ["/etc/sudoers.d/scapforge"], [], [], 0.015, fired.result.detail)
    assert fired.detail == ("restored on the target by the dead-man switch (systemd) at 2026-11-30 13:58:03 UTC: "
                            "restored 1, removed 0, verified; systemctl reload ssh exited 0")
    cancelled = DeadmanState.from_module({"was_armed": True, "cancelled": True, "method": "sleep", "pid": 4619}, 0.1)
    assert cancelled.detail == "dead-man switch disarmed before it fired (process 4619 stopped)"
    lost = DeadmanState.from_module({"was_armed": True, "lost": True, "method": "sleep", "pid": 7}, 0.1)
    assert lost.detail == ("dead-man switch armed, but nothing is scheduled any more (process 7 gone: the target "
                           "rebooted?)")
    assert DeadmanState.from_module({}, 0.0).detail == "no dead-man switch was armed"
    assert json.loads(json.dumps(fired.to_dict()))["result"]["verified"] is True


def test_fired_result_with_an_error_is_not_verified():
    result = fired_restore_result(dict(FIRED, verified=False, error="CheckpointFailed: manifest unreadable",
                                       lock_acquired=False))
    assert result.verified is False and result.mismatches == ["restore failed: CheckpointFailed: manifest unreadable"]
    assert result.detail.endswith("1 mismatch(es); systemctl reload ssh exited 0; it ran without the checkpoint "
                                  "lock (a module call held it too long)")


# ---------------------------------------------------------------- target-side code on real files here

SAVE = dict(shallow=[], fresh=False, link_targets=True, max_file_bytes=1 << 20, max_total_bytes=1 << 22,
            max_entries=100)


def _save(root, cid, paths):
    store = core.Store(str(root), cid)
    try:
        return core.do_save(store, dict(SAVE, paths=paths), core.read_mounts(), False)
    finally:
        store.close()


def _restore(root, cid, check_mode=False, discard_after=False):
    store = core.Store(str(root), cid)
    try:
        return core.do_restore(store, {"discard_after": discard_after}, core.read_mounts(), check_mode)
    finally:
        store.close()


def test_acl_text_reads_the_kernel_format():
    assert core.acl_text(acl_bytes(NOBODY_ACL)) == NOBODY_ACL_TEXT
    assert core.acl_text(acl_bytes([(0x01, 7, 0xFFFFFFFF), (0x08, 5, 4), (0x04, 5, 0xFFFFFFFF),
                                    (0x10, 5, 0xFFFFFFFF), (0x20, 1, 0xFFFFFFFF)])) == \
        "user::rwx,group:4:r-x,group::r-x,mask::r-x,other::--x"
    assert core.acl_text(b"\x01\x00") == "0x0100"


def test_xattrs_acls_and_selinux_labels_are_saved_restored_and_verified(tmp_path):
    work = tmp_path / "etc"
    work.mkdir()
    conf = work / "app.conf"
    conf.write_text("key=1\n")
    os.chmod(conf, 0o600)
    os.setxattr(conf, core.ACL_ACCESS, acl_bytes(NOBODY_ACL))
    os.setxattr(conf, core.SELINUX, b"system_u:object_r:etc_t:s0\x00")
    os.setxattr(conf, "user.origin", b"scap")
    os.setxattr(conf, "trusted.scapforge", b"\x00\x01binary\xff")
    os.symlink("app.conf", work / "link")
    os.setxattr(work / "link", core.SELINUX, b"system_u:object_r:etc_t:s0\x00", follow_symlinks=False)
    os.setxattr(work, core.ACL_DEFAULT, acl_bytes(NOBODY_ACL))
    mode_with_acl = os.stat(conf).st_mode & 0o7777
    assert mode_with_acl == 0o640                       # the ACL's mask shows in the group bits

    saved = _save(tmp_path / "root", "x-1", [str(work)])
    assert saved["saved"] == [str(work)] and saved["xattrs"] == {str(work): [core.ACL_DEFAULT]}
    manifest = json.loads((tmp_path / "root" / "x-1" / "manifest.json").read_text())
    assert sorted(manifest["records"][str(conf)]["xattrs"]) == sorted(
        [core.ACL_ACCESS, core.SELINUX, "user.origin", "trusted.scapforge"])

    os.removexattr(conf, core.ACL_ACCESS)
    os.chmod(conf, 0o644)
    os.setxattr(conf, core.SELINUX, b"system_u:object_r:shadow_t:s0\x00")
    os.setxattr(conf, "user.origin", b"other")
    os.setxattr(conf, "user.added", b"x")
    os.removexattr(conf, "trusted.scapforge")
    os.setxattr(work / "link", core.SELINUX, b"unconfined_u:object_r:user_tmp_t:s0\x00", follow_symlinks=False)
    os.removexattr(work, core.ACL_DEFAULT)

    plan = _restore(tmp_path / "root", "x-1", check_mode=True)
    assert plan["verified"] is False
    assert plan["mismatches"] == [
        "%s: default ACL missing (saved %s)" % (work, NOBODY_ACL_TEXT),
        "%s: mode 0644 != saved 0640" % conf,
        "%s: SELinux context system_u:object_r:shadow_t:s0 != saved system_u:object_r:etc_t:s0" % conf,
        "%s: ACL missing (saved %s)" % (conf, NOBODY_ACL_TEXT),
        "%s: xattr trusted.scapforge missing (saved sha256:%s (9 bytes))"
        % (conf, __import__("hashlib").sha256(b"\x00\x01binary\xff").hexdigest()[:12]),
        "%s: xattr user.added added ('x')" % conf,
        "%s: xattr user.origin 'other' != saved 'scap'" % conf,
        "%s: SELinux context unconfined_u:object_r:user_tmp_t:s0 != saved system_u:object_r:etc_t:s0" % (work / "link"),
    ]
    done = _restore(tmp_path / "root", "x-1")
    assert done["verified"] is True and done["mismatches"] == []
    assert sorted(done["restored"]) == sorted([str(work), str(conf), str(work / "link")])
    assert os.stat(conf).st_mode & 0o7777 == 0o640
    assert os.getxattr(conf, core.ACL_ACCESS) == acl_bytes(NOBODY_ACL)
    assert os.getxattr(conf, core.SELINUX) == b"system_u:object_r:etc_t:s0\x00"
    assert os.getxattr(conf, "trusted.scapforge") == b"\x00\x01binary\xff"
    assert "user.added" not in os.listxattr(conf)
    assert os.getxattr(work / "link", core.SELINUX, follow_symlinks=False) == b"system_u:object_r:etc_t:s0\x00"
    assert os.getxattr(work, core.ACL_DEFAULT) == acl_bytes(NOBODY_ACL)


def test_a_rewritten_file_gets_its_labels_back_not_the_inherited_ones(tmp_path):
    """The content differs, so the file is rewritten through a temporary file; the directory's
    default ACL would give that file an ACL the saved one did not have."""
    work = tmp_path / "d"
    work.mkdir()
    plain = work / "plain"
    plain.write_text("one\n")
    os.chmod(plain, 0o644)
    _save(tmp_path / "root", "x-2", [str(plain)])
    os.setxattr(work, core.ACL_DEFAULT, acl_bytes(NOBODY_ACL))
    plain.write_text("two\n")
    done = _restore(tmp_path / "root", "x-2")
    assert done["verified"] is True and done["restored"] == [str(plain)]
    assert plain.read_text() == "one\n" and core.ACL_ACCESS not in os.listxattr(plain)
    assert os.stat(plain).st_mode & 0o7777 == 0o644


def test_a_checkpoint_without_xattrs_recorded_does_not_compare_them(tmp_path):
    """Checkpoints saved before this version hold no "xattrs": restoring them ignores xattrs."""
    f = tmp_path / "f"
    f.write_text("x\n")
    _save(tmp_path / "root", "old", [str(f)])
    manifest_path = tmp_path / "root" / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for rec in manifest["records"].values():
        rec.pop("xattrs", None)
    manifest_path.write_text(json.dumps(manifest))
    os.setxattr(f, "user.later", b"1")
    assert _restore(tmp_path / "root", "old")["verified"] is True
    assert "user.later" in os.listxattr(f)


def _armed(store_dir, token, **extra):
    ddir = os.path.join(store_dir, core.DEADMAN_DIR)
    os.makedirs(ddir, exist_ok=True)
    core.write_json(os.path.join(ddir, core.ARMED_FILE), dict({"token": token, "method": "sleep"}, **extra))
    return ddir


def test_fired_restore_restores_records_and_respects_disarm_and_token(tmp_path):
    f = tmp_path / "sudoers"
    f.write_text("scapforge ALL=(ALL) NOPASSWD: ALL\n")
    _save(tmp_path / "root", "d-1", [str(f)])
    cdir = str(tmp_path / "root" / "d-1")
    ddir = _armed(cdir, "t0k3n", post_restore=["echo post; exit 4"])
    f.write_text("scapforge ALL=(ALL) ALL\n")

    assert core.fired_restore(cdir, "other-token") == (3, None)          # an older arm's program
    assert f.read_text() == "scapforge ALL=(ALL) ALL\n"
    status, result = core.fired_restore(cdir, "t0k3n")
    assert status == 0 and f.read_text() == "scapforge ALL=(ALL) NOPASSWD: ALL\n"
    assert result["verified"] is True and result["restored"] == [str(f)] and result["lock_acquired"] is True
    assert result["post_restore"][0]["rc"] == 4 and result["post_restore"][0]["output"] == "post\n"
    assert json.loads(open(os.path.join(ddir, core.RESULT_FILE)).read()) == result
    assert os.path.isfile(os.path.join(cdir, "manifest.json"))           # kept for the controller
    assert core.fired_restore(cdir, "t0k3n") == (0, None)                # fires once

    _save(tmp_path / "root", "d-2", [str(f)])
    cdir2 = str(tmp_path / "root" / "d-2")
    _armed(cdir2, "t2", disarmed_at=time.time())
    f.write_text("changed\n")
    assert core.fired_restore(cdir2, "t2") == (0, None) and f.read_text() == "changed\n"


def test_fired_restore_waits_for_the_lock_then_goes_ahead(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    _save(tmp_path / "root", "d-3", [str(f)])
    cdir = str(tmp_path / "root" / "d-3")
    _armed(cdir, "tk")
    f.write_text("b\n")
    holder = core.Store(str(tmp_path / "root"), "d-3")
    holder.check_root(create=False)                  # a module call holding the lock
    try:
        started = time.monotonic()
        status, result = core.fired_restore(cdir, "tk", lock_wait=0.6)
        assert 0.5 < time.monotonic() - started < 5
    finally:
        holder.close()
    assert status == 0 and result["lock_acquired"] is False and f.read_text() == "a\n"


def _deadman_params(timeout, **extra):
    return dict({"timeout": timeout, "method": "auto", "post_restore": [], "fresh": False}, **extra)


def _deadman_call(root, cid, func, *args):
    store = core.Store(str(root), cid)
    try:
        return func(store, *args)
    finally:
        store.close()


def test_sleep_switch_fires_by_itself(tmp_path):
    """No systemd here: method auto chooses the detached sleep; the written program (a copy of
    checkpoint_store next to fire.py) restores the file one second later, on its own."""
    assert deadman.systemd_usable()[0] is False
    f = tmp_path / "f"
    f.write_text("before\n")
    _save(tmp_path / "root", "s-1", [str(f)])
    armed = _deadman_call(tmp_path / "root", "s-1", deadman.arm, _deadman_params(1, post_restore=["echo fired"]), False)
    dm = armed["deadman"]
    assert armed["changed"] is True and dm["armed"] is True and dm["method"] == "sleep" and dm["pid"] > 0
    assert dm["method_why"] == "systemd is not the running init system (/run/systemd/system is missing)"
    ddir = tmp_path / "root" / "s-1" / "deadman"
    assert (ddir / "scapforge_checkpoint_store.py").read_bytes() == open(core.__file__, "rb").read()
    f.write_text("after\n")
    deadline = time.monotonic() + 20
    while not (ddir / "result.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f.read_text() == "before\n"
    status = _deadman_call(tmp_path / "root", "s-1", deadman.status)
    assert status["fired"] is True and status["armed"] is False and status["result"]["verified"] is True
    assert status["result"]["post_restore"][0]["output"] == "fired\n"
    assert "restored 1, removed 0, verified" in (ddir / "fire.log").read_text()
    with pytest.raises(deadman.DeadmanFailed) as err:           # a fired result must be read first
        _deadman_call(tmp_path / "root", "s-1", deadman.arm, _deadman_params(5), False)
    assert err.value.error_kind == "fired"
    off = _deadman_call(tmp_path / "root", "s-1", deadman.disarm, False)["deadman"]
    assert off["fired"] is True and off["cancelled"] is False and off["result"]["verified"] is True


def test_sleep_switch_disarmed_in_time_restores_nothing(tmp_path):
    f = tmp_path / "f"
    f.write_text("before\n")
    first = _deadman_call(tmp_path / "root", "s-2", deadman.arm, _deadman_params(3), False)["deadman"]
    again = _deadman_call(tmp_path / "root", "s-2", deadman.arm, _deadman_params(60), False)
    assert again["changed"] is False and again["deadman"]["already"] is True
    assert again["deadman"]["pid"] == first["pid"] and again["deadman"]["timeout"] == 3
    _save(tmp_path / "root", "s-2", [str(f)])       # the attempt's first save, after the arm
    f.write_text("after\n")
    started = time.monotonic()
    off = _deadman_call(tmp_path / "root", "s-2", deadman.disarm, False)
    assert time.monotonic() - started < 4
    assert off["changed"] is True and off["deadman"]["cancelled"] is True and off["deadman"]["fired"] is False
    assert not os.path.exists("/proc/%d" % first["pid"]) or deadman.proc_start_time(first["pid"]) is None
    time.sleep(4)                                    # past the time it would have fired
    assert f.read_text() == "after\n"
    assert not (tmp_path / "root" / "s-2" / "deadman" / "result.json").exists()
    twice = _deadman_call(tmp_path / "root", "s-2", deadman.disarm, False)
    assert twice["changed"] is False and twice["deadman"]["cancelled"] is True and twice["deadman"]["disarmed"] is True


def test_the_lab_provider_is_loaded_from_the_checkout_and_missing_from_a_built_collection(tmp_path, monkeypatch):
    """Issue 16: the lab's provider ships in lab/, which galaxy.yml leaves out of the build."""
    from ansible_collections.scapforge.remediation.plugins.plugin_utils import checkpoint

    assert "lab" not in PROVIDERS and LabProvider.__module__ == "scapforge_lab_checkpoint_provider"
    monkeypatch.setattr(checkpoint, "COLLECTION_ROOT", str(tmp_path))  # a built collection: no lab/
    with pytest.raises(CheckpointError, match="part of the checkout .lab/checkpoint_provider.py., not of the built") as err:
        make_provider("lab", None, {}, {})
    assert err.value.kind == "bad_options"
    with pytest.raises(CheckpointError, match="unknown checkpoint provider 'zfs' .known: command, files, lab."):
        make_provider("zfs", None, {}, {})
