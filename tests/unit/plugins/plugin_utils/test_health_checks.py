"""The health checks' script and the parsing of its output (plugin_utils.health).

Pure tests of the line format (hostile output: forged result lines, "OK", "UNHEALTHY",
nothing at all, garbage) and of the verdicts against a baseline; and the real script run by
this machine's /bin/sh with harmless user commands only (echo, printf, exit: no check that
reads or changes the system), to prove that what a command prints cannot forge a result.
The checks on a real host are in tests/integration/test_health_checks.py.
"""
import subprocess

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import health as H

NONCE = "0123456789abcdef"


def line(name, rc, nonce=NONCE):
    return "SCAPFORGE_CHECK %s %s %s" % (nonce, name, rc)


def data(name, text, nonce=NONCE):
    return "SCAPFORGE_DATA %s %s %s" % (nonce, name, text)


END = "SCAPFORGE_END " + NONCE


def script_stdout(commands, checks=()):
    """stdout of the real script (only user commands, no system check) under this machine's
    sh, decoded without newline translation (as Ansible's to_text does)."""
    script = H.build_script(NONCE, list(checks), commands=commands, user="root")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=60, cwd="/", check=False)
    return proc.stdout.decode("utf-8", "surrogateescape")


def run_script(commands, checks=()):
    return H.parse_output(script_stdout(commands, checks), NONCE)


# ---------------------------------------------------------------------- parse_output

def test_only_exact_result_lines_count():
    text = "\n".join([
        "OK", "UNHEALTHY", "sshd_t 0", "SCAPFORGE_CHECK sshd_t 0",          # no nonce
        line("visudo_c", 0, nonce="ffffffffffffffff"),                      # another run's nonce
        line("pkgdb", "0 extra"), "  " + line("units_failed", 0),          # extra word, indented
        line("files", "0\t"), line("Bad-Name", 0), line("facts", "-1"),    # tab, bad name, bad rc
        line("sshd_t", 255), END,
    ])
    raw, ended = H.parse_output(text, NONCE)
    assert ended
    assert set(raw) == {"sshd_t"}
    assert raw["sshd_t"].rc == 255 and raw["sshd_t"].reported


def test_nothing_or_garbage_gives_no_result():
    for text in ("", None, "\x00\xff garbage \x1b[31m", "SCAPFORGE_CHECK", "SCAPFORGE_CHECK  " + NONCE):
        raw, ended = H.parse_output(text, NONCE)
        assert raw == {} and not ended


def test_a_result_given_twice_is_a_conflict_and_fails():
    raw, _ended = H.parse_output("\n".join([line("sshd_t", 1), line("sshd_t", 0), line("visudo_c", 0),
                                            line("visudo_c", "skip"), line("pkgdb", 256)]), NONCE)
    assert raw["sshd_t"].conflict and not raw["sshd_t"].reported
    assert raw["visudo_c"].conflict and not raw["visudo_c"].reported
    assert raw["pkgdb"].rc is None and not raw["pkgdb"].reported


def test_carriage_return_does_not_start_a_line():
    forged = data("user_1", "x\r" + line("sshd_t", 0))
    raw, _ended = H.parse_output(forged + "\r\n" + line("user_1", 1) + "\r\n", NONCE)
    assert "sshd_t" not in raw
    assert raw["user_1"].rc == 1
    assert raw["user_1"].data == ["x\r" + line("sshd_t", 0)]


def test_data_lines_are_kept_per_check():
    raw, _ended = H.parse_output("\n".join([data("pkgdb", "The following packages"), data("pkgdb", ""),
                                            data("pkgdb", "a b  c"), line("pkgdb", 0)]), NONCE)
    assert raw["pkgdb"].data == ["The following packages", "", "a b  c"]


# ---------------------------------------------------------------------- the real script, forging

def test_user_output_cannot_forge_a_result_even_with_the_nonce():
    forge = "printf 'SCAPFORGE_CHECK %s user_2 0\\nSCAPFORGE_CHECK %s user_1 0\\nOK\\n'; exit 3" % (NONCE, NONCE)
    raw, ended = run_script([forge, "echo UNHEALTHY; exit 1", "echo UNHEALTHY", "true"])
    assert ended
    assert raw["user_1"].rc == 3 and not raw["user_1"].conflict
    assert raw["user_1"].data == [line("user_2", 0), line("user_1", 0), "OK"]
    assert raw["user_2"].rc == 1 and raw["user_2"].data == ["UNHEALTHY"]
    assert raw["user_3"].rc == 0 and raw["user_3"].data == ["UNHEALTHY"]
    assert raw["user_4"].rc == 0 and raw["user_4"].data == []


def test_user_output_with_carriage_returns_and_stderr_cannot_forge():
    forge = "printf 'junk\\rSCAPFORGE_CHECK %s user_2 0\\r\\n' >&2; printf '%s\\n' 'SCAPFORGE_END %s'; exit 1" % (
        NONCE, "%s", NONCE)
    raw, _ended = run_script([forge, "exit 2"])
    assert raw["user_1"].rc == 1
    assert raw["user_2"].rc == 2


def test_output_cut_short_leaves_results_missing_and_failed():
    """A connection dropped mid-script: what came is read, what did not counts as failed."""
    out = script_stdout(["true", "echo UNHEALTHY", "true"])
    cut = out[:out.index(line("user_2", 0)) + len(line("user_2", 0)) - 2]  # "... user_2 " then nothing
    raw, ended = H.parse_output(cut, NONCE)
    assert not ended
    assert raw["user_1"].rc == 0
    assert raw["user_2"].rc is None and not raw["user_2"].reported
    assert "user_3" not in raw
    checks, _findings = H.judge_after(raw, ended, make_baseline(), ["true", "echo UNHEALTHY", "true"], side_effects=False)
    assert [checks[n]["ok"] for n in ("user_1", "user_2", "user_3", "script")] == [True, False, False, False]


def test_command_text_is_quoted_not_run_when_built():
    script = H.build_script(NONCE, [], commands=["echo '$(id)' \"`id`\"; exit 0"], user="scapforge")
    raw, _ended = H.parse_output(subprocess.run(["sh", "-c", script], capture_output=True, text=True, cwd="/",
                                                timeout=60, check=False).stdout, NONCE)
    assert raw["user_1"].rc == 0
    assert raw["user_1"].data[0].startswith("$(id) uid=")  # single quotes kept, backquotes run by the command


def test_build_script_refuses_bad_nonce_user_or_check():
    with pytest.raises(ValueError):
        H.build_script("not-hex!", [])
    with pytest.raises(ValueError):
        H.build_script(NONCE, [], user="root; rm -rf /")
    with pytest.raises(ValueError):
        H.build_script(NONCE, ["reboot"])


def test_long_output_is_cut():
    raw, _ended = run_script(["i=0; while [ $i -lt 100 ]; do printf '%0500d\\n' $i; i=$((i+1)); done; exit 0"])
    assert len(raw["user_1"].data) == 40
    assert all(len(d) == 400 for d in raw["user_1"].data)


# ---------------------------------------------------------------------- baseline and verdicts

STAT_SHADOW = "F 81a0 0 42 root shadow /etc/shadow"
STAT_PASSWD = "F 81a4 0 0 root root /etc/passwd"
STAT_SUDOERS_D = "F 8120 0 0 root root /etc/sudoers.d/scapforge"


def baseline_text(**over):
    parts = {
        "facts": [data("facts", x) for x in ("user=scapforge", "sshd=1", "visudo=1", "runuser=1", "pkg=dpkg",
                                             "systemd=1")] + [line("facts", 0)],
        "sshd_t": [line("sshd_t", 0)],
        "visudo_c": [data("visudo_c", "/etc/sudoers: parsed OK"), line("visudo_c", 0)],
        "pkgdb": [line("pkgdb", 0)],
        "units_active": [data("units_active", "ssh.service loaded active running OpenBSD Secure Shell server"),
                         data("units_active", "cron.service loaded active running cron"),
                         line("units_active", 0)],
        "files": [data("files", STAT_SHADOW), data("files", STAT_PASSWD), data("files", STAT_SUDOERS_D),
                  line("files", 0)],
        "login": [line("login_%s_%s" % (s, w), 0) for s in ("sh", "bash") for w in ("root", "user")],
        "user": [data("user_1", "fine"), line("user_1", 0), line("user_2", 1)],
    }
    parts.update(over)
    return "\n".join(sum(parts.values(), [])) + "\n" + END + "\n"


COMMANDS = ("test -f /etc/passwd", "exit 1")


def make_baseline(**over):
    return H.baseline_from_output(baseline_text(**over), NONCE, COMMANDS, seconds=0.5, taken_at=1.0)


def after_text(**over):
    parts = {
        "sshd_t": [line("sshd_t", 0)], "visudo_c": [line("visudo_c", 0)], "pkgdb": [line("pkgdb", 0)],
        "units_failed": [line("units_failed", 0)],
        "files": [data("files", STAT_SHADOW), data("files", STAT_PASSWD), data("files", STAT_SUDOERS_D),
                  line("files", 0)],
        "login": [line("login_%s_%s" % (s, w), 0) for s in ("sh", "bash") for w in ("root", "user")],
        "user": [line("user_1", 0), line("user_2", 1)],
        "services": services_lines(),
    }
    parts.update(over)
    return "\n".join(sum(parts.values(), [])) + "\n" + END + "\n"


def services_lines(running=()):
    """The ``services`` check's answer: ``active`` for the units in ``running``, else inactive."""
    return [data("services", "active" if unit in running else "inactive") for unit in H.core_units()] + \
        [line("services", 0)]


def judge(text, created=(), modes_asked=(), commands=COMMANDS, baseline=None):
    raw, ended = H.parse_output(text, NONCE)
    return H.judge_after(raw, ended, baseline or make_baseline(), commands, created, modes_asked)


def test_baseline_reads_facts_units_files_and_failing_checks():
    base = make_baseline()
    assert base.user == "scapforge"
    assert base.facts == {"sshd": True, "visudo": True, "runuser": True, "systemd": True, "pkg": "dpkg"}
    assert base.active_units == ["cron.service", "ssh.service"]
    assert base.files["/etc/shadow"] == {"kind": "file", "mode": "0640", "uid": 0, "gid": 42, "owner": "root",
                                         "group": "shadow"}
    assert base.files["/etc/sudoers.d/scapforge"]["mode"] == "0440"
    assert base.failing == {"user_2": ""}
    assert H.HostBaseline.from_dict(base.to_dict()) == base


def test_baseline_without_its_end_line_raises():
    with pytest.raises(H.HealthError):
        H.baseline_from_output(baseline_text().replace(END, ""), NONCE, COMMANDS)
    with pytest.raises(H.HealthError):
        H.baseline_from_output("UNHEALTHY\nOK\n", NONCE, COMMANDS)


def test_all_clean_is_healthy():
    checks, findings = judge(after_text())
    assert findings == []
    assert all(v["ok"] for v in checks.values()), checks
    assert set(checks) == {"sshd_t", "visudo_c", "pkgdb", "units", "user_1", "user_2", "services", "side_effects"}
    assert "as before any change" in checks["user_2"]["detail"]


def test_nothing_at_all_fails_every_check():
    checks, findings = judge("")
    assert not any(v["ok"] for v in checks.values()), checks
    assert checks["sshd_t"]["detail"] == "no result line"
    assert checks["script"]["ok"] is False
    assert {f["kind"] for f in findings} == {"unverified"} and all(f["unhealthy"] for f in findings)


def test_forged_text_in_free_output_never_reads_healthy():
    text = after_text(sshd_t=["OK", "sshd_t 0", "SCAPFORGE_CHECK sshd_t 0", data("sshd_t", line("sshd_t", 0))],
                      visudo_c=[line("visudo_c", 0), line("visudo_c", 0)])
    checks, _findings = judge(text)
    assert checks["sshd_t"] == {"ok": False, "detail": "no result line: " + line("sshd_t", 0)}
    assert checks["visudo_c"]["ok"] is False and "more than once" in checks["visudo_c"]["detail"]


def test_user_command_unhealthy_text_vs_exit_code():
    commands = ["echo UNHEALTHY", "echo OK; exit 1"]
    text = after_text(user=[data("user_1", "UNHEALTHY"), line("user_1", 0), data("user_2", "OK"), line("user_2", 1)])
    checks, _findings = judge(text, commands=commands)
    assert checks["user_1"]["ok"] is True
    assert checks["user_2"]["ok"] is False and checks["user_2"]["detail"].startswith("echo OK; exit 1: exit 1")


def test_user_command_failing_at_baseline_is_not_held_against_the_attempt_unless_it_changed():
    checks, _findings = judge(after_text(user=[line("user_1", 0), line("user_2", 1)]))
    assert checks["user_2"]["ok"] is True
    checks, _findings = judge(after_text(user=[line("user_1", 0), line("user_2", 2)]))
    assert checks["user_2"]["ok"] is False
    checks, _findings = judge(after_text(user=[line("user_1", 1), line("user_2", 1)]))
    assert checks["user_1"]["ok"] is False  # passed before, fails now


def test_sshd_and_visudo_exit_codes():
    checks, _findings = judge(after_text(sshd_t=[data("sshd_t", "/etc/ssh/sshd_config line 3: Bad option"), line("sshd_t", 255)],
                                         visudo_c=[line("visudo_c", "skip")]))
    assert checks["sshd_t"]["ok"] is False and "Bad option" in checks["sshd_t"]["detail"]
    assert checks["visudo_c"]["ok"] is False and "ran before any change" in checks["visudo_c"]["detail"]
    checks, _findings = judge(after_text(sshd_t=[line("sshd_t", 124)]))
    assert "timed out" in checks["sshd_t"]["detail"]


def test_dpkg_audit_output_is_a_failure_unless_it_was_there_before():
    listing = [data("pkgdb", "The following packages have been unpacked but not yet configured."),
               data("pkgdb", " scapforge-health-test test")]
    checks, _findings = judge(after_text(pkgdb=listing + [line("pkgdb", 0)]))
    assert checks["pkgdb"]["ok"] is False and "scapforge-health-test" in checks["pkgdb"]["detail"]
    base = make_baseline(pkgdb=listing + [line("pkgdb", 0)])
    checks, _findings = judge(after_text(pkgdb=listing + [line("pkgdb", 0)]), baseline=base)
    assert checks["pkgdb"]["ok"] is True and "the same problems" in checks["pkgdb"]["detail"]


def test_units_active_before_and_failed_now():
    failed = [data("units_failed", "cron.service loaded failed failed cron"),
              data("units_failed", "\u25cf other.service loaded failed failed never active"),
              line("units_failed", 0)]
    checks, _findings = judge(after_text(units_failed=failed))
    assert checks["units"]["ok"] is False
    assert checks["units"]["units"] == ["cron.service"]
    checks, _findings = judge(after_text(units_failed=failed[1:]))
    assert checks["units"]["ok"] is True and "other.service" in checks["units"]["detail"]
    checks, _findings = judge(after_text(units_failed=[line("units_failed", "skip")]))
    assert checks["units"]["ok"] is False  # systemd ran at baseline


# ---------------------------------------------------------------------- side effects

def test_login_shell_new_stderr_is_unhealthy_old_stderr_is_not():
    typeset = "/etc/profile.d/tmout.sh: 1: typeset: not found"
    checks, findings = judge(after_text(login=[data("login_sh_root", typeset), line("login_sh_root", 0)] +
                                        [line("login_%s_%s" % (s, w), 0) for s, w in
                                         (("sh", "user"), ("bash", "root"), ("bash", "user"))]))
    assert checks["side_effects"]["ok"] is False
    assert findings == [{"kind": "login_shell", "path": None, "shell": "sh -l -c true", "user": "root",
                         "what": "new output on stderr", "before": "(empty)", "after": typeset,
                         "unhealthy": True}]
    base = make_baseline(login=[data("login_sh_root", typeset), line("login_sh_root", 0)] +
                         [line("login_%s_%s" % (s, w), 0) for s, w in (("sh", "user"), ("bash", "root"),
                                                                       ("bash", "user"))])
    text = after_text(login=[data("login_sh_root", typeset), line("login_sh_root", 0)] +
                      [line("login_%s_%s" % (s, w), 0) for s, w in (("sh", "user"), ("bash", "root"), ("bash", "user"))])
    _checks, findings = judge(text, baseline=base)
    assert findings == []


def test_login_shell_exit_code_and_missing_result():
    login = [line("login_bash_user", 1), line("login_sh_root", 0), line("login_bash_root", 0)]
    _checks, findings = judge(after_text(login=login))
    by_shell = {(f["shell"], f["user"]): f for f in findings}
    assert by_shell[("bash -l -c true", "scapforge")]["what"] == "exit code changed"
    assert by_shell[("sh -l -c true", "scapforge")]["kind"] == "unverified"
    assert all(f["unhealthy"] for f in findings)


def test_sensitive_file_owner_change_and_removal():
    files = [data("files", "F 81a0 1000 1000 scapforge scapforge /etc/shadow"), data("files", STAT_PASSWD),
             data("files", "F absent - - - - /etc/sudoers.d/scapforge"), line("files", 0)]
    checks, findings = judge(after_text(files=files))
    assert checks["side_effects"]["ok"] is False
    shadow = [f for f in findings if f["path"] == "/etc/shadow"][0]
    assert shadow["what"] == "owner and group changed"
    assert shadow["before"] == "file root:shadow 0640" and shadow["after"] == "file scapforge:scapforge 0640"
    assert shadow["unhealthy"] is True
    gone = [f for f in findings if f["path"] == "/etc/sudoers.d/scapforge"][0]
    assert gone["what"] == "removed" and gone["unhealthy"] is False


def test_sensitive_file_mode_and_kind_change():
    files = [data("files", "F 81a4 0 42 root shadow /etc/shadow"), data("files", "F a1ff 0 0 root root /etc/passwd"),
             data("files", STAT_SUDOERS_D), line("files", 0)]
    _checks, findings = judge(after_text(files=files))
    assert {(f["path"], f["what"]) for f in findings} == {("/etc/shadow", "mode changed"),
                                                          ("/etc/passwd", "file type and mode changed")}


def created_lines(*stats):
    return [data("created", s) for s in stats] + [line("created", 0)]


def test_created_file_0600_under_profile_d_is_unhealthy():
    text = after_text(created=created_lines(
        "C 8180 0 0 root root /etc/profile.d/tmout.sh", "D 41ed 0 0 root root /etc/profile.d",
        "S 81a4 0 0 root root /etc/profile.d/bash_completion.sh", "S 8180 0 0 root root /etc/profile.d/tmout.sh"))
    checks, findings = judge(text, created=["/etc/profile.d/tmout.sh"])
    assert checks["side_effects"]["ok"] is False
    assert findings == [{"kind": "created_mode", "path": "/etc/profile.d/tmout.sh", "shell": None, "user": None,
                         "what": "created 0600, others cannot read it; its directory's other entries are 0644",
                         "before": "absent", "after": "file root:root 0600 (expected 0644)", "unhealthy": True}]


def test_created_file_modes_elsewhere_reported_or_fine():
    text = after_text(created=created_lines(
        "C 8180 0 0 root root /etc/modprobe.d/cramfs.conf", "D 41ed 0 0 root root /etc/modprobe.d",
        "C 81a4 0 0 root root /etc/sysctl.d/99-x.conf", "D 41ed 0 0 root root /etc/sysctl.d",
        "C 8180 0 0 root root /etc/private/key", "D 41c0 0 0 root root /etc/private",
        "C 8180 0 0 root root /etc/profile.d/asked.sh", "D 41ed 0 0 root root /etc/profile.d",
        "C 41c0 0 0 root root /etc/security/limits.d", "D 41ed 0 0 root root /etc/security",
        "S 81a4 0 0 root root /etc/security/limits.conf", "S 41ed 0 0 root root /etc/security/namespace.d"))
    created = ["/etc/modprobe.d/cramfs.conf", "/etc/sysctl.d/99-x.conf", "/etc/private/key",
               "/etc/profile.d/asked.sh", "/etc/security/limits.d", "/var/tmp/not-etc"]
    checks, findings = judge(text, created=created, modes_asked={"/etc/profile.d/asked.sh"})
    assert checks["side_effects"]["ok"] is True
    assert [(f["path"], f["after"], f["unhealthy"]) for f in findings] == [
        ("/etc/modprobe.d/cramfs.conf", "file root:root 0600 (expected 0644)", False),
        ("/etc/security/limits.d", "dir root:root 0700 (expected 0755)", False),
    ]


def test_created_without_result_is_unverified():
    _checks, findings = judge(after_text(), created=["/etc/profile.d/tmout.sh"])
    assert [(f["kind"], f["unhealthy"]) for f in findings] == [("unverified", True)]


def test_report_to_dict_keeps_old_shape_and_adds_checks():
    assert H.HealthReport(True, "ok", 1.234).to_dict() == {"healthy": True, "detail": "ok", "seconds": 1.23}
    report = H.HealthReport(False, "x", 0.5, checks={"sshd_t": {"ok": False, "detail": "exit 255"}},
                            side_effects=[{"kind": "login_shell"}])
    assert report.to_dict()["checks"] == {"sshd_t": {"ok": False, "detail": "exit 255"}}
    assert report.to_dict()["side_effects"] == [{"kind": "login_shell"}]


def test_more_created_paths_than_examined_are_counted():
    created = ["/etc/scapforge/f%03d" % i for i in range(H.MAX_CREATED + 5)]
    script = H.build_script(NONCE, ["created"], created=created)
    assert "/etc/scapforge/f199" in script and "/etc/scapforge/f200" not in script
    _checks, findings = judge(after_text(created=[line("created", 0)]), created=created)
    assert findings == [{"kind": "created_mode", "path": None, "shell": None, "user": None,
                         "what": "5 more created paths not examined (at most 200 are)", "before": "", "after": "",
                         "unhealthy": False}]


@pytest.mark.parametrize("sudo_user, expected", [("alice", "alice"), ("root", ""), ("a b", ""), ("$(id)", ""),
                                                 ("x*", "")])
def test_connecting_user_from_sudo_user_only_when_a_plain_name(sudo_user, expected):
    script = H.build_script(NONCE, [], user=None)
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, cwd="/",
                          env={"PATH": "/usr/bin:/bin", "SUDO_USER": sudo_user}, check=False)
    raw, ended = H.parse_output(proc.stdout, NONCE)
    assert ended and raw["facts"].data[0] == "user=" + expected
