"""Health that exercises what users do (issue 17 item 6): the verdicts of ``sshd -T``, the
PAM stacks' modules, the throwaway account's password change and the time and log services
(plugin_utils.health), and the pure parts of the target-side probe (module_utils.health_probe).

The probe's PAM walk runs here on a stack directory of the test's own (tmp_path) with
module directories of its own; nothing of this machine's PAM, accounts or services is read
or changed. The real checks on a lab host: tests/faults/test_health_user_paths.py.
"""
import ast
import os
import string

import pytest

from ansible_collections.scapforge.remediation.plugins.module_utils import health_probe as P
from ansible_collections.scapforge.remediation.plugins.plugin_utils import health as H

NONCE = "0123456789abcdef"
END = "SCAPFORGE_END " + NONCE


def line(name, rc):
    return "SCAPFORGE_CHECK %s %s %s" % (NONCE, name, rc)


def data(name, text):
    return "SCAPFORGE_DATA %s %s %s" % (NONCE, name, text)


def states(running=()):
    return [data("services", "active" if unit in running else "inactive") for unit in H.core_units()]


PASSWD_OK = [data("passwd_change", "S useradd 0 "), data("passwd_change", "S chpasswd 0 "),
             data("passwd_change", "S passwd 0 passwd: password updated successfully"), line("passwd_change", 0)]
PAM_OK = [data("pam_modules", "N 17"), line("pam_modules", 0)]


def baseline(extra=(), units=("ssh.service", "chrony.service", "systemd-journald.service")):
    rows = [data("facts", "systemd=1"), line("facts", 0), line("sshd_t", 0), line("visudo_c", 0), line("pkgdb", 0),
            line("units_active", 0)] + [data("units_active", "%s loaded active running x" % u) for u in units] + list(extra)
    return H.baseline_from_output("\n".join(rows + [END]) + "\n", NONCE, [])


FULL = [line("sshd_effective", 0)] + PAM_OK + PASSWD_OK


def after(base, rows):
    raw, ended = H.parse_output("\n".join(list(rows) + [END]) + "\n", NONCE)
    return H.judge_user_paths(raw, base)


def codes(base, rows):
    return H.verdict_codes(after(base, rows), [])


RUNNING = states(("chrony.service", "systemd-journald.service")) + [line("services", 0)]


# ---------------------------------------------------------------------- baseline

def test_baseline_keeps_the_user_path_results_and_pam_problems():
    base = baseline(FULL[:1] + [data("pam_modules", "P missing pam_gone.so login not in /lib/security"),
                                data("pam_modules", "N 9"), line("pam_modules", 0)] + PASSWD_OK)
    assert base.results["sshd_effective"]["rc"] == 0
    assert base.results["passwd_change"]["rc"] == 0
    assert base.pam_problems == {"missing pam_gone.so": "login: not in /lib/security"}
    assert H.HostBaseline.from_dict(base.to_dict()) == base


def test_a_baseline_without_them_judges_only_the_services():
    base = baseline()
    assert "passwd_change" not in base.results and base.pam_problems is None
    assert set(after(base, RUNNING)) == {"services"}
    # and check_after does not ask for them
    assert "_sf_probe=" not in H.build_script(NONCE, ["services"], user="root")


def test_all_fine_gives_no_code():
    assert codes(baseline(FULL), FULL + RUNNING) == []


# ---------------------------------------------------------------------- each check, its own code

def test_sshd_T_failing_is_its_own_code_unless_it_failed_so_before():
    rows = [line("sshd_effective", 255), data("sshd_effective", "Bad configuration option: Frobnicate")]
    assert codes(baseline(FULL), rows + PAM_OK + PASSWD_OK + RUNNING) == ["sshd_effective_config_invalid"]
    failing = [line("sshd_effective", 255)] + PAM_OK + PASSWD_OK
    assert codes(baseline(failing), rows + PAM_OK + PASSWD_OK + RUNNING) == []


def test_a_new_missing_pam_module_is_unhealthy_one_missing_before_is_not():
    gone = [data("pam_modules", "P missing pam_pwquality.so common-password not in /lib/x86_64-linux-gnu/security"),
            data("pam_modules", "N 18"), line("pam_modules", 0)]
    checks = after(baseline(FULL), FULL[:1] + gone + PASSWD_OK + RUNNING)
    assert checks["pam_modules"]["ok"] is False
    assert checks["pam_modules"]["problems"] == ["missing pam_pwquality.so"]
    assert "common-password" in checks["pam_modules"]["detail"]
    assert H.verdict_codes(checks, []) == ["pam_module_broken"]
    same = after(baseline(FULL[:1] + gone + PASSWD_OK), FULL[:1] + gone + PASSWD_OK + RUNNING)
    assert same["pam_modules"]["ok"] is True and "as before any change" in same["pam_modules"]["detail"]


@pytest.mark.parametrize("problem", [
    "P load pam_x.so sshd,login /lib/security/pam_x.so: invalid ELF header",
    "P symbol pam_access.so common-password no pam_sm_chauthtok",
    "P include common-foo sshd no such file in /etc/pam.d",
])
def test_a_module_that_does_not_load_or_an_include_gone_is_unhealthy(problem):
    rows = [data("pam_modules", problem), data("pam_modules", "N 3"), line("pam_modules", 0)]
    assert codes(baseline(FULL), FULL[:1] + rows + PASSWD_OK + RUNNING) == ["pam_module_broken"]


@pytest.mark.parametrize("rows", [
    [data("pam_modules", "P missing pam_x.so sshd why"), line("pam_modules", 0)],    # no closing N line: cut
    [data("pam_modules", "N 3"), data("pam_modules", "P missing pam_x.so a b"), line("pam_modules", 0)],
    [data("pam_modules", "OK"), data("pam_modules", "N 3"), line("pam_modules", 0)],  # a stray line
    [line("pam_modules", 1)],                                                          # the probe crashed
    [],                                                                                # no result line
])
def test_pam_output_cut_malformed_or_missing_fails(rows):
    assert codes(baseline(FULL), FULL[:1] + rows + PASSWD_OK + RUNNING) == ["pam_module_broken"]


def test_pam_problems_parses_kinds_and_refuses_others():
    assert H.pam_problems(["P load pam_a.so x,y libfoo.so.1: cannot open", "P include common-z su gone", "N 4"]) == {
        "load pam_a.so": "x,y: libfoo.so.1: cannot open", "include common-z": "su: gone"}
    assert H.pam_problems(["N 0"]) == {}
    assert H.pam_problems(["P exploded pam_a.so x y", "N 1"]) is None
    assert H.pam_problems([]) is None


def test_a_password_change_that_fails_is_unhealthy_and_names_the_step():
    rows = [data("passwd_change", "S useradd 0 "),
            data("passwd_change", "S chpasswd 1 chpasswd: (user scapforge-hc-1a2b3c4d) pam_chauthtok() failed"),
            line("passwd_change", 1)]
    checks = after(baseline(FULL), FULL[:3] + rows + RUNNING)
    assert checks["passwd_change"]["ok"] is False
    assert checks["passwd_change"]["detail"].startswith("password change failed: chpasswd exited 1: chpasswd: (user")
    assert H.verdict_codes(checks, []) == ["password_change_failed"]


def test_an_account_left_behind_is_named():
    rows = PASSWD_OK[:-1] + [data("passwd_change", "L scapforge-hc-00ff00ff"), line("passwd_change", 3)]
    checks = after(baseline(FULL), FULL[:3] + rows + RUNNING)
    assert checks["passwd_change"] == {"ok": False, "detail": "password change failed: account left behind: scapforge-hc-00ff00ff"}


def test_a_password_change_failing_as_before_any_change_is_not_held_against_the_attempt():
    failing = [data("passwd_change", "S passwd 1 passwd: Authentication token manipulation error"), line("passwd_change", 1)]
    checks = after(baseline(FULL[:3] + failing), FULL[:3] + failing + RUNNING)
    assert checks["passwd_change"]["ok"] is True
    assert checks["passwd_change"]["detail"].startswith("as before any change: passwd exited 1")
    skipped = [data("passwd_change", "useradd, chpasswd or passwd not installed"), line("passwd_change", "skip")]
    assert after(baseline(FULL), FULL[:3] + skipped + RUNNING)["passwd_change"]["ok"] is False  # ran before, now not


def test_the_time_service_stopped_is_unhealthy():
    rows = states(("systemd-journald.service",)) + [line("services", 0)]
    checks = after(baseline(FULL), FULL + rows)
    assert checks["services"] == {"ok": False, "detail": "the time service chrony.service ran before any change and runs no more"}
    assert H.verdict_codes(checks, []) == ["core_service_stopped"]


def test_the_log_service_stopped_is_unhealthy_and_another_time_service_in_its_place_is_fine():
    rows = states(("systemd-timesyncd.service",)) + [line("services", 0)]
    checks = after(baseline(FULL), FULL + rows)
    assert checks["services"]["ok"] is False
    assert checks["services"]["detail"] == ("the log service systemd-journald.service ran before any change and runs no "
                                            "more; the time service is now systemd-timesyncd.service (was chrony.service)")
    swapped = states(("systemd-timesyncd.service", "systemd-journald.service")) + [line("services", 0)]
    assert after(baseline(FULL), FULL + swapped)["services"] == {
        "ok": True, "detail": "the time service is now systemd-timesyncd.service (was chrony.service)"}


def test_a_log_service_stopped_while_another_ran_all_along_is_unhealthy():
    base = baseline(FULL, units=("rsyslog.service", "systemd-journald.service"))
    checks = after(base, FULL + states(("systemd-journald.service",)) + [line("services", 0)])
    assert checks["services"] == {"ok": False, "detail": "the log service rsyslog.service ran before any change and runs no more"}
    restarting = [data("services", "activating" if u == "rsyslog.service" else "active" if u == "systemd-journald.service"
                       else "inactive") for u in H.core_units()] + [line("services", 0)]
    assert after(base, FULL + restarting)["services"]["ok"] is True


def test_services_not_running_before_are_not_asked_for():
    base = baseline(FULL, units=("ssh.service",))
    assert after(base, FULL + states() + [line("services", 0)])["services"] == {
        "ok": True, "detail": "no time or log service ran before any change"}
    assert after(base, FULL + [data("services", "no running systemd"), line("services", "skip")])["services"]["ok"]


@pytest.mark.parametrize("rows", [
    states(("chrony.service", "systemd-journald.service"))[:-1] + [line("services", 0)],  # a line short
    [data("services", "no running systemd"), line("services", "skip")],                   # systemd gone
    [],                                                                                    # no result line
])
def test_services_answer_short_or_missing_fails(rows):
    assert codes(baseline(FULL), FULL + rows) == ["core_service_stopped"]


# ---------------------------------------------------------------------- the script

def test_the_script_carries_the_probe_only_when_asked():
    script = H.build_script(NONCE, ["sshd_effective", "pam_modules", "passwd_change", "services"], user="root")
    assert script.count("_sf_probe=") == 1 and "sshd -T" in script
    assert '"$_py" -c "$_sf_probe" passwd' in script and "systemctl is-active chrony.service" in script
    assert "_sf_probe=" not in H.build_script(NONCE, ["sshd_effective", "services"], user="root")


def test_the_probe_is_python_3_9_and_stdlib_only():
    tree = ast.parse(H.probe_source(), feature_version=(3, 9))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"os", "pwd", "re", "secrets", "select", "signal", "subprocess", "sys", "time", "ctypes", "pty"}


# ---------------------------------------------------------------------- the probe's pure parts

def test_pam_references_read_types_controls_includes_and_continuations():
    text = ("# comment\n@include common-auth\n-session optional pam_systemd.so\n"
            "auth [success=1 default=ignore] pam_unix.so nullok # trailing\n"
            "password include su\naccount \\\n  required pam_nologin.so\n\nsession\n")
    assert P.pam_references(text) == [
        ("@include", False, "include", "common-auth"), ("session", True, "optional", "pam_systemd.so"),
        ("auth", False, "[success=1 default=ignore]", "pam_unix.so"), ("password", False, "include", "su"),
        ("account", False, "required", "pam_nologin.so")]


def fake_pam(tmp_path, stacks, modules):
    pam, mods = tmp_path / "pam.d", tmp_path / "security"
    pam.mkdir()
    mods.mkdir()
    for name, text in stacks.items():
        (pam / name).write_text(text)
    for name, content in modules.items():
        (mods / name).write_bytes(content)
    return str(pam), (str(mods),)


def test_pam_probe_names_missing_modules_includes_and_non_loading_files(tmp_path):
    pam, dirs = fake_pam(tmp_path, {
        "common-auth": "auth required pam_gone.so\n-auth optional pam_maybe.so\nauth required pam_junk.so\n",
        "sshd": "@include common-auth\n@include common-nothere\naccount include login-missing\n",
    }, {"pam_junk.so": b"not an ELF file"})
    lines = P.pam_probe(pam, dirs)
    assert lines[-1] == "N 3"
    problems = H.pam_problems(lines)
    assert sorted(problems) == ["include common-nothere", "include login-missing", "load pam_junk.so", "missing pam_gone.so"]
    assert problems["missing pam_gone.so"].startswith("common-auth: not in ")
    assert problems["include login-missing"].startswith("sshd: no such file")


LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PERMIT = next((os.path.join(d, "pam_permit.so") for d in P.MODULE_DIRS if os.path.isfile(os.path.join(d, "pam_permit.so"))),
              None)


def test_a_library_without_the_stacks_function_is_a_symbol_problem(tmp_path):
    pam, _dirs = fake_pam(tmp_path, {"login": "auth required %s\n" % LIBC}, {})
    assert H.pam_problems(P.pam_probe(pam, ())) == {"symbol %s" % LIBC: "login: no pam_sm_authenticate"}


def test_a_real_module_loads_and_has_its_functions(tmp_path):
    pam, _dirs = fake_pam(tmp_path, {"x": "auth required pam_permit.so\npassword required pam_permit.so\n"}, {})
    assert P.pam_probe(pam, (os.path.dirname(PERMIT),)) == ["N 1"]


def test_throwaway_passwords_have_every_class_no_class_repeats_and_share_no_character():
    for round_ in range(50):
        old, new = P.new_password(0), P.new_password(1)
        for word in (old, new):
            assert len(word) == 24
            classes = [next(i for i, c in enumerate((string.ascii_uppercase, string.ascii_lowercase, string.digits))
                            if ch in c) if ch.isalnum() else 3 for ch in word]
            assert classes == [i % 4 for i in range(24)]
        assert set(old) & set(new) == set()  # pam_unix obscure: never "too similar"
    assert P.PREFIX == H.THROWAWAY_PREFIX == "scapforge-hc-"


def test_the_account_backups_are_put_back_as_they_were(tmp_path):
    kept, absent = tmp_path / "shadow-", tmp_path / "subuid-"
    kept.write_bytes(b"root:*:19000:0:99999:7:::\n")
    os.chmod(kept, 0o600)
    os.utime(kept, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    saved = P.save_backups((str(kept), str(absent)))
    # what useradd and userdel leave: the backup rewritten with the probe account, a new one beside it
    kept.write_bytes(b"root:*:19000:0:99999:7:::\nscapforge-hc-1a2b3c4d:!:20000::::::\n")
    os.chmod(kept, 0o644)
    absent.write_bytes(b"scapforge-hc-1a2b3c4d:100000:65536\n")
    assert P.restore_backups(saved) == []
    assert kept.read_bytes() == b"root:*:19000:0:99999:7:::\n"
    info = kept.stat()
    assert (info.st_mode & 0o7777, info.st_mtime_ns) == (0o600, 1_600_000_000_000_000_000)
    assert not absent.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["shadow-"]
