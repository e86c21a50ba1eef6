"""The checkpoint module and the files provider, for real on a lab host over SSH.

The module runs through Ansible (ad-hoc ``ansible -m scapforge.remediation.checkpoint``,
become, JSON callback); what it reports is checked against what the host says through a
separate SSH session (sha256sum, stat, find, readlink). The last test runs the whole cycle
(paths_touched -> cover -> real modules -> restore) from a running action plugin
(tests/integration/fixtures/action_plugins/checkpoint_tasks.py).

Every file the tests touch on the host is put back at the end, whatever happens.
Timings of each module call are collected in TIMINGS and printed at the end (pytest -s).
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ACTION_PLUGINS = REPO_ROOT / "tests" / "integration" / "fixtures" / "action_plugins"
MODULE = "scapforge.remediation.checkpoint"
ROOT = "/var/lib/scapforge/checkpoints"

LOGIN_DEFS = "/etc/login.defs"
NEW_FILE = "/etc/profile.d/scapforge-ckpt-test.sh"
RULES_D = "/etc/audit/rules.d"
LINK = "/etc/scapforge-ckpt-link"
SCRATCH = "/var/tmp/scapforge-ckpt"
TIMINGS = []


def _env(**extra):
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **extra)


def module(lab_host, inventory, args, check=False, label=None):
    """Run the checkpoint module on the host through ``ansible`` ad hoc; return its result dict."""
    argv = [str(BIN / "ansible"), "-i", str(inventory), lab_host.name, "-b", "-m", MODULE, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=_env(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"), check=False)
    wall = time.monotonic() - started
    assert proc.stdout.strip().startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][lab_host.name]
    TIMINGS.append({"call": label or args["state"], "target_s": result.get("elapsed"),
                    "ansible_wall_s": round(wall, 2)})
    return result


def sh(lab_host, command, check=True):
    """Run a shell command as root on the host (separate SSH session); return stdout."""
    return lab_host.ssh("sudo sh -c %s" % shlex.quote(command), check=check).stdout


def snapshot(lab_host, *paths):
    """What the host says about paths, independently of the module: for every path and every
    entry below it, kind/mode/owner/group/link target (find -printf, stat -c '%a %U %G'
    equivalents) and sha256sum of every regular file; absent paths are listed as such."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    meta = sh(lab_host, "for p in %s; do [ -e \"$p\" ] || [ -L \"$p\" ] || echo \"$p absent\"; done; "
                        "find %s -printf '%%p %%y %%m %%u %%g %%l\\n' 2>/dev/null; true" % (quoted, quoted))
    sums = sh(lab_host, "find %s -type f -exec sha256sum {} + 2>/dev/null; true" % quoted)
    return {"meta": sorted(meta.splitlines()), "sha256": sorted(sums.splitlines())}


def stat_line(lab_host, path):
    return sh(lab_host, "stat -c '%a %U %G' " + shlex.quote(path)).strip()


def sha256(lab_host, path):
    return sh(lab_host, "sha256sum " + shlex.quote(path)).split()[0]


@pytest.fixture(scope="module", autouse=True)
def print_timings():
    yield
    if TIMINGS:
        print("\ncheckpoint module calls (target seconds / ansible ad-hoc wall seconds):")
        for row in TIMINGS:
            print("  %-34s %8s s  %6.2f s" % (row["call"], row["target_s"], row["ansible_wall_s"]))


@pytest.fixture
def host(lab_host):
    """The lab host with the files these tests touch backed up, and everything put back after."""
    had_audit = sh(lab_host, "[ -d /etc/audit ] && echo yes || echo no").strip() == "yes"
    had_root = sh(lab_host, "[ -d /var/lib/scapforge ] && echo yes || echo no").strip() == "yes"
    for path in (LOGIN_DEFS, "/etc/issue", "/etc/issue.net"):
        sh(lab_host, "cp -a %s %s.scapforge-ckpt-bak" % (path, path))
    yield lab_host
    sh(lab_host, "chattr -i %s %s/* 2>/dev/null; umount %s/sub 2>/dev/null; umount %s/* 2>/dev/null; true"
       % (LOGIN_DEFS, SCRATCH, SCRATCH, SCRATCH), check=False)
    for path in (LOGIN_DEFS, "/etc/issue", "/etc/issue.net"):
        sh(lab_host, "mv -f %s.scapforge-ckpt-bak %s" % (path, path), check=False)
    sh(lab_host, "rm -rf %s %s %s* /etc/profile.d/scapforge-ckpt-* /var/tmp/scapforge-ckpt-*" % (NEW_FILE, LINK, SCRATCH),
       check=False)
    sh(lab_host, "rm -rf %s/scapforge-ckpt-* %s/ckpt-*" % (RULES_D, ROOT), check=False)
    if not had_audit:
        sh(lab_host, "rm -rf --one-file-system /etc/audit", check=False)
    if not had_root:
        sh(lab_host, "rm -rf --one-file-system /var/lib/scapforge", check=False)


def test_save_change_restore_verify(host, lab_inventory):
    """login.defs + a file that does not exist yet + a directory + a symlink, changed every
    way a fix changes things, come back byte for byte with owner and mode."""
    sh(host, "mkdir -p %s && printf -- '-w /etc/passwd -p wa\\n' > %s/scapforge-ckpt-10.rules && "
             "printf -- '-w /etc/group -p wa\\n' > %s/scapforge-ckpt-20.rules && "
             "mkdir -p %s/scapforge-ckpt-sub && echo keep > %s/scapforge-ckpt-sub/k && "
             "chmod 0640 %s/scapforge-ckpt-10.rules && ln -sfn /etc/issue %s && rm -f %s"
       % ((RULES_D,) * 6 + (LINK, NEW_FILE)))
    watched = (LOGIN_DEFS, NEW_FILE, RULES_D, LINK, "/etc/issue")
    before = snapshot(host, *watched)
    digest_before = sha256(host, LOGIN_DEFS)
    stat_before = stat_line(host, LOGIN_DEFS)

    cid = "ckpt-%d-main" % os.getpid()
    saved = module(host, lab_inventory, {"state": "save", "id": cid, "fresh": True,
                                         "paths": [LOGIN_DEFS, NEW_FILE, RULES_D, LINK]}, label="save (4 paths)")
    assert saved["changed"] and not saved.get("failed"), saved
    assert saved["saved"] == [LOGIN_DEFS, NEW_FILE, RULES_D, LINK]
    assert saved["uncovered"] == {}
    assert saved["kinds"] == {LOGIN_DEFS: "file", NEW_FILE: "absent", RULES_D: "dir", LINK: "symlink",
                              "/etc/issue": "file"}
    assert saved["link_targets"] == {LINK: "/etc/issue"}
    again = module(host, lab_inventory, {"state": "save", "id": cid, "paths": [LOGIN_DEFS, RULES_D + "/new.rules"]},
                   label="save again (no-op)")
    assert again["changed"] is False and again["already"] == [LOGIN_DEFS]
    assert again["within"] == {RULES_D + "/new.rules": RULES_D}

    # what a fix (or a bad one) does
    sh(host, "echo 'UMASK 077' >> %s && chmod 600 %s && chown nobody:nogroup %s" % ((LOGIN_DEFS,) * 3))
    sh(host, "echo 'umask 077' > %s" % NEW_FILE)
    sh(host, "echo '-e 2' >> %s/scapforge-ckpt-10.rules && chmod 0600 %s/scapforge-ckpt-10.rules && "
             "rm %s/scapforge-ckpt-20.rules && echo new > %s/scapforge-ckpt-30.rules && "
             "mkdir -p %s/scapforge-ckpt-newdir/deeper && echo x > %s/scapforge-ckpt-newdir/deeper/f && "
             "rm -r %s/scapforge-ckpt-sub && chmod 0700 %s" % ((RULES_D,) * 8))
    sh(host, "ln -sfn /etc/hostname %s && echo changed >> /etc/issue" % LINK)
    assert snapshot(host, *watched) != before

    restored = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore")
    assert restored["verified"] is True and restored["mismatches"] == [], restored
    assert restored["discarded"] is True
    assert set(restored["removed"]) >= {NEW_FILE, RULES_D + "/scapforge-ckpt-30.rules",
                                        RULES_D + "/scapforge-ckpt-newdir"}
    assert set(restored["restored"]) >= {LOGIN_DEFS, RULES_D, RULES_D + "/scapforge-ckpt-10.rules",
                                         RULES_D + "/scapforge-ckpt-20.rules", LINK, "/etc/issue"}

    # independently of the module
    assert sha256(host, LOGIN_DEFS) == digest_before
    assert stat_line(host, LOGIN_DEFS) == stat_before
    assert sh(host, "[ -e %s ] && echo present || echo gone" % NEW_FILE).strip() == "gone"
    assert sh(host, "readlink %s" % LINK).strip() == "/etc/issue"
    assert snapshot(host, *watched) == before
    assert sh(host, "[ -e %s/%s ] && echo kept || echo discarded" % (ROOT, cid)).strip() == "discarded"


def test_check_mode_changes_nothing(host, lab_inventory):
    cid = "ckpt-%d-check" % os.getpid()
    planned = module(host, lab_inventory, {"state": "save", "id": cid, "paths": [LOGIN_DEFS]}, check=True,
                     label="save --check")
    assert planned["changed"] is True and planned["saved"] == [LOGIN_DEFS]
    assert module(host, lab_inventory, {"state": "status", "id": cid})["exists"] is False

    module(host, lab_inventory, {"state": "save", "id": cid, "paths": [LOGIN_DEFS]}, label="save (1 file)")
    digest = sha256(host, LOGIN_DEFS)
    sh(host, "echo 'PASS_MAX_DAYS 60' >> %s && chmod 0600 %s" % (LOGIN_DEFS, LOGIN_DEFS))
    plan = module(host, lab_inventory, {"state": "restore", "id": cid}, check=True, label="restore --check")
    assert plan["changed"] is True and plan["verified"] is False and plan["restored"] == [LOGIN_DEFS]
    assert [m.split(":")[0] for m in plan["mismatches"]] == [LOGIN_DEFS, LOGIN_DEFS]
    assert "mode 0600 != saved 0644" in plan["mismatches"][0]
    assert sha256(host, LOGIN_DEFS) != digest                        # nothing was put back...
    assert module(host, lab_inventory, {"state": "status", "id": cid})["exists"] is True  # ...or dropped
    done = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (1 file)")
    assert done["verified"] is True and sha256(host, LOGIN_DEFS) == digest


def test_caps_and_a_deleted_checkpoint(host, lab_inventory):
    """Over a cap: uncovered with why, never claimed. Growing after the save is fine (the saved
    copy comes back). A checkpoint whose directory was deleted: a clear error, not a traceback."""
    sh(host, "mkdir -p %s && head -c 1000 /dev/urandom > %s/small && head -c 9000 /dev/urandom > %s/big"
       % (SCRATCH, SCRATCH, SCRATCH))
    small = sha256(host, SCRATCH + "/small")
    cid = "ckpt-%d-caps" % os.getpid()
    saved = module(host, lab_inventory, {"state": "save", "id": cid, "max_file_bytes": 4096,
                                         "paths": [SCRATCH + "/small", SCRATCH + "/big"]}, label="save (cap)")
    assert saved["saved"] == [SCRATCH + "/small"]
    assert saved["uncovered"] == {SCRATCH + "/big": "file of 9000 bytes is over the 4096-byte cap"}
    dir_cid = cid + "-dir"
    whole = module(host, lab_inventory, {"state": "save", "id": dir_cid, "max_file_bytes": 4096, "paths": [SCRATCH]},
                   label="save (dir over cap)")
    assert whole["saved"] == [] and whole["covered"] == []
    assert whole["uncovered"] == {SCRATCH: "%s/big: file of 9000 bytes is over the 4096-byte cap" % SCRATCH}

    sh(host, "head -c 20000 /dev/urandom >> %s/small" % SCRATCH)    # grew past the cap after the save
    restored = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (grown file)")
    assert restored["verified"] is True and restored["restored"] == [SCRATCH + "/small"]
    assert restored["uncovered"] == {SCRATCH + "/big": "file of 9000 bytes is over the 4096-byte cap"}
    assert sha256(host, SCRATCH + "/small") == small

    gone = "ckpt-%d-gone" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": gone, "paths": [SCRATCH + "/small"]})
    sh(host, "rm -rf %s/%s" % (ROOT, gone))
    failed = module(host, lab_inventory, {"state": "restore", "id": gone}, label="restore (deleted)")
    assert failed["failed"] is True and failed["error_kind"] == "missing"
    assert failed["msg"] == ("checkpoint %s does not exist under %s (never saved, discarded, or its directory was "
                             "deleted): nothing to restore" % (gone, ROOT))
    assert "Traceback" not in json.dumps(failed) and "module_stderr" not in failed

    broken = "ckpt-%d-corrupt" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": broken, "paths": [SCRATCH + "/small"]})
    sh(host, "echo '{not json' > %s/%s/manifest.json" % (ROOT, broken))
    failed = module(host, lab_inventory, {"state": "restore", "id": broken})
    assert failed["error_kind"] == "corrupt" and "manifest" in failed["msg"] and "Traceback" not in json.dumps(failed)

    bad = module(host, lab_inventory, {"state": "save", "id": "../etc", "paths": ["/etc/x"]})
    assert bad["failed"] is True and bad["error_kind"] == "bad_id"


def test_saved_copy_corrupted_is_a_mismatch(host, lab_inventory):
    sh(host, "mkdir -p %s && echo original > %s/f" % (SCRATCH, SCRATCH))
    cid = "ckpt-%d-blob" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": cid, "paths": [SCRATCH + "/f"]})
    sh(host, "echo changed > %s/f && for b in %s/%s/blobs/*; do echo tampered > $b; done" % (SCRATCH, ROOT, cid))
    res = module(host, lab_inventory, {"state": "restore", "id": cid})
    assert res["verified"] is False and res["discarded"] is False
    assert res["mismatches"][0].startswith(SCRATCH + "/f: restore failed: [Errno 5] saved copy ")
    assert "is corrupt" in res["mismatches"][0]
    assert sh(host, "cat %s/f" % SCRATCH) == "changed\n"   # never written from a bad copy


def test_immutable_file_gives_a_mismatch_and_keeps_the_checkpoint(host, lab_inventory):
    """chattr +i (the container has CAP_LINUX_IMMUTABLE) makes the rename over the file fail."""
    cid = "ckpt-%d-immutable" % os.getpid()
    digest = sha256(host, LOGIN_DEFS)
    module(host, lab_inventory, {"state": "save", "id": cid, "paths": [LOGIN_DEFS]})
    sh(host, "echo 'UMASK 027' >> %s && chattr +i %s" % (LOGIN_DEFS, LOGIN_DEFS))
    res = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (immutable: fails)")
    assert res["verified"] is False and res["discarded"] is False and res["exists"] is True
    assert res["mismatches"][0] == LOGIN_DEFS + ": restore failed: [Errno 1] Operation not permitted"
    assert res["mismatches"][1].startswith(LOGIN_DEFS + ": sha256 ")
    assert res["restored"] == []
    assert sh(host, "ls -a /etc | grep -c '^.scapforge-ckpt' || true").strip() == "0"   # no temp file left

    sh(host, "chattr -i %s" % LOGIN_DEFS)
    res = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (after chattr -i)")
    assert res["verified"] is True and sha256(host, LOGIN_DEFS) == digest


def test_restore_never_crosses_a_mount_point(host, lab_inventory):
    """A directory created since the save is removed like rm -rf --one-file-system: a
    filesystem mounted inside it is left alone and reported."""
    sh(host, "mkdir -p %s && echo a > %s/a" % (SCRATCH, SCRATCH))
    cid = "ckpt-%d-mount" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": cid, "paths": [SCRATCH]})
    sh(host, "mkdir %s/sub && mount -t tmpfs scapforge-ckpt %s/sub && echo precious > %s/sub/p"
       % (SCRATCH, SCRATCH, SCRATCH))
    res = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (mount point: fails)")
    assert res["verified"] is False
    assert res["mismatches"][0] == ("%s: restore failed: [Errno 16] %s/sub is a mount point: not removed"
                                    % (SCRATCH, SCRATCH))
    assert "%s: unexpected entry sub" % SCRATCH in res["mismatches"]
    assert sh(host, "cat %s/sub/p" % SCRATCH) == "precious\n"

    sh(host, "umount %s/sub" % SCRATCH)
    res = module(host, lab_inventory, {"state": "restore", "id": cid})
    assert res["verified"] is True and res["removed"] == [SCRATCH + "/sub"]
    assert sh(host, "ls -A %s" % SCRATCH).split() == ["a"]


def run_checkpoint_tasks(tmp_path, host, inventory, cid, tasks, finish="restore"):
    report_path = tmp_path / "report.json"
    play = [{"hosts": host.name, "gather_facts": False, "tasks": [{"checkpoint_tasks": {
        "id": cid, "tasks": tasks, "finish": finish, "report_path": str(report_path)}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "-l", host.name,
                           str(tmp_path / "play.yml")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=_env(ANSIBLE_ACTION_PLUGINS=str(ACTION_PLUGINS)), check=False)
    assert proc.returncode == 0 and report_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(report_path.read_text())


def test_files_provider_from_a_running_action_plugin(tmp_path, host, lab_inventory):
    """The loop's cycle with real modules: each task's paths are covered just before it runs
    (one module call per task that needs one), then one restore puts everything back."""
    pdir = "/var/tmp/scapforge-ckpt-pdir"
    sh(host, "mkdir -p %s && echo entry > %s/e && chmod 0755 %s" % (pdir, pdir, pdir))
    new_copy = "/etc/profile.d/scapforge-ckpt-prov.sh"
    watched = (LOGIN_DEFS, "/etc/issue", "/etc/issue.net", new_copy, pdir)
    before = snapshot(host, *watched)
    tasks = [
        {"module": "ansible.builtin.stat", "args": {"path": LOGIN_DEFS}},
        {"module": "ansible.builtin.lineinfile", "args": {"path": LOGIN_DEFS, "regexp": "^UMASK", "line": "UMASK 077"}},
        {"module": "ansible.builtin.lineinfile", "args": {"path": LOGIN_DEFS, "line": "PASS_MAX_DAYS 60"}},
        {"module": "ansible.builtin.copy", "args": {"dest": new_copy, "content": "umask 077\n", "mode": "0644"}},
        {"module": "ansible.builtin.shell", "args": {"cmd": "chmod 600 /etc/issue && echo hardened >> /etc/issue.net"}},
        {"module": "ansible.builtin.file", "args": {"path": pdir, "state": "directory", "mode": "0700"}},
    ]
    cid = "ckpt-%d-provider" % os.getpid()
    report = run_checkpoint_tasks(tmp_path, host, lab_inventory, cid, tasks)
    assert report["error"] is None, report
    assert all(r["ok"] for r in report["executed"]), report["executed"]
    assert report["newly_covered"] == [[], [LOGIN_DEFS], [], [new_copy], ["/etc/issue", "/etc/issue.net"], [pdir]]
    assert report["touched"][5]["shallow"] == [pdir] and report["touched"][0]["read_only"] is True
    calls = report["checkpoint"]["calls"]
    assert [c["state"] for c in calls] == ["save", "save", "save", "save", "restore"]

    restore = report["restore"]
    assert restore["verified"] is True and restore["mismatches"] == [], restore
    assert sorted(restore["restored"]) == sorted([LOGIN_DEFS, "/etc/issue", "/etc/issue.net", pdir])
    assert restore["removed"] == [new_copy]
    assert snapshot(host, *watched) == before     # entries of the shallow directory were left alone
    for call in calls:
        TIMINGS.append({"call": "provider " + call["state"], "target_s": call["target_seconds"],
                        "ansible_wall_s": call["seconds"]})


def test_files_provider_refuses_a_stale_checkpoint_with_the_same_id(tmp_path, host, lab_inventory):
    """A new attempt never inherits an old attempt's record: the first cover() is fresh."""
    cid = "ckpt-%d-stale" % os.getpid()
    module(host, lab_inventory, {"state": "save", "id": cid, "paths": ["/etc/issue"]})
    report = run_checkpoint_tasks(tmp_path, host, lab_inventory, cid, [
        {"module": "ansible.builtin.lineinfile", "args": {"path": "/etc/issue", "line": "x"}}])
    assert report["error"].startswith("checkpoint %s save: checkpoint %s already exists under %s" % (cid, cid, ROOT))
    assert report["error"].endswith("(kind exists)")
    assert report["executed"] == []                 # the task did not run without its checkpoint
    module(host, lab_inventory, {"state": "discard", "id": cid})


# ---------------------------------------------------------------- ACLs, extended attributes, SELinux labels

#: a POSIX ACL giving uid 65534 (nobody) read: getfacl's "user::rw-,user:65534:r--,group::r--,mask::r--,other::---"
#: as the kernel stores it (include/uapi/linux/posix_acl_xattr.h; the lab has no setfacl)
NOBODY_ACL_HEX = "".join(("02000000", "01000600ffffffff", "02000400feff0000", "04000400ffffffff", "10000400ffffffff",
                          "20000000ffffffff"))
NOBODY_ACL_TEXT = "user::rw-,user:65534:r--,group::r--,mask::r--,other::---"
XATTR_PY = """
import json, os, sys
op, args = sys.argv[1], sys.argv[2:]
if op == "set":
    os.setxattr(args[0], args[1], bytes.fromhex(args[2]), follow_symlinks=False)
elif op == "remove":
    os.removexattr(args[0], args[1], follow_symlinks=False)
else:
    print(json.dumps(dict((p, dict((n, os.getxattr(p, n, follow_symlinks=False).hex())
                                   for n in sorted(os.listxattr(p, follow_symlinks=False)))) for p in args)))
"""


def xattr(lab_host, op, *args):
    """Set, remove or dump extended attributes on the host as root (python3 os.*xattr, no follow)."""
    return sh(lab_host, "python3 -c %s %s %s" % (shlex.quote(XATTR_PY), op, " ".join(shlex.quote(a) for a in args)))


def label(text):
    return (text.encode() + b"\x00").hex()


def test_acls_xattrs_and_selinux_labels_come_back(host, lab_inventory):
    """An ACL that lets nobody read a 0600-mode file, a default ACL on its directory, user.*
    and trusted.* attributes, and security.selinux labels on a file and a symlink are saved,
    changed, restored and verified, and a mismatch names what differs. The lab kernel runs no
    SELinux, but (with CAP_SYS_ADMIN in the container, on the overlay's ext4) the
    security.selinux attribute is stored and read exactly as on an SELinux host, and the
    module restores it with setxattr: no chcon, no policy involved. What is not tested here:
    a policy refusing a relabel (no SELinux policy on the lab)."""
    d = SCRATCH + "/xattr"
    secret, link = d + "/secret", d + "/link"
    sh(host, "mkdir -p %s && chmod 0755 %s %s && printf 'secret\\n' > %s && chmod 0600 %s && ln -sfn secret %s"
       % (d, SCRATCH, d, secret, secret, link))
    xattr(host, "set", secret, "system.posix_acl_access", NOBODY_ACL_HEX)
    xattr(host, "set", secret, "security.selinux", label("system_u:object_r:etc_t:s0"))
    xattr(host, "set", secret, "user.origin", b"scapforge".hex())
    xattr(host, "set", secret, "trusted.scapforge", "00ff10")
    xattr(host, "set", link, "security.selinux", label("system_u:object_r:etc_t:s0"))
    xattr(host, "set", d, "system.posix_acl_default", NOBODY_ACL_HEX)
    nobody_reads = "su -s /bin/sh nobody -c 'cat %s' 2>&1; true" % secret
    assert sh(host, nobody_reads) == "secret\n"                      # the ACL works
    before = xattr(host, "dump", d, secret, link)
    stat_before = stat_line(host, secret)
    assert stat_before == "640 root root"                           # the ACL's mask shows in the group bits

    cid = "ckpt-%d-xattr" % os.getpid()
    saved = module(host, lab_inventory, {"state": "save", "id": cid, "paths": [d]}, label="save (xattrs)")
    assert saved["saved"] == [d] and saved["xattrs"] == {d: ["system.posix_acl_default"]}

    xattr(host, "remove", secret, "system.posix_acl_access")
    sh(host, "chmod 0600 %s" % secret)
    xattr(host, "set", secret, "security.selinux", label("system_u:object_r:shadow_t:s0"))
    xattr(host, "set", secret, "user.added", b"x".hex())
    xattr(host, "remove", secret, "trusted.scapforge")
    xattr(host, "set", link, "security.selinux", label("unconfined_u:object_r:user_tmp_t:s0"))
    xattr(host, "remove", d, "system.posix_acl_default")
    assert "Permission denied" in sh(host, nobody_reads)

    plan = module(host, lab_inventory, {"state": "restore", "id": cid}, check=True, label="restore --check (xattrs)")
    assert plan["verified"] is False
    assert plan["mismatches"] == [
        "%s: default ACL missing (saved %s)" % (d, NOBODY_ACL_TEXT),
        "%s: SELinux context unconfined_u:object_r:user_tmp_t:s0 != saved system_u:object_r:etc_t:s0" % link,
        "%s: mode 0600 != saved 0640" % secret,
        "%s: SELinux context system_u:object_r:shadow_t:s0 != saved system_u:object_r:etc_t:s0" % secret,
        "%s: ACL missing (saved %s)" % (secret, NOBODY_ACL_TEXT),
        "%s: xattr trusted.scapforge missing (saved sha256:%s (3 bytes))"
        % (secret, hashlib.sha256(bytes.fromhex("00ff10")).hexdigest()[:12]),
        "%s: xattr user.added added ('x')" % secret,
    ]
    done = module(host, lab_inventory, {"state": "restore", "id": cid}, label="restore (xattrs)")
    assert done["verified"] is True and done["mismatches"] == [], done
    assert sorted(done["restored"]) == sorted([d, link, secret])
    # independently of the module: the attributes byte for byte, the mode, and the ACL at work
    assert xattr(host, "dump", d, secret, link) == before
    assert stat_line(host, secret) == stat_before
    assert sh(host, nobody_reads) == "secret\n"
