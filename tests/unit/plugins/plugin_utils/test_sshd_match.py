"""sshd's Match blocks compared with the run's baseline (plugin_utils.health, case
sshd-match-override in ../shared/cases/cases.yml).

Pure tests of the parsing (blocks, whitespace, comments, ``Keyword=value``, a cut output) and
of the findings (removed, changed, added, a block gone or new); then the real script part
under this machine's /bin/sh, pointed at files in a temporary directory (never the machine's
own /etc/ssh). The same comparison on a lab host, through the loop, is in
tests/faults/test_side_effect_cases.py.
"""
import subprocess

import pytest

from ansible_collections.scapforge.remediation.plugins.plugin_utils import health as H

NONCE = "00112233aabbccdd"

CASE = """\
# stock Debian file, then the case's tail
Include /etc/ssh/sshd_config.d/*.conf
KbdInteractiveAuthentication no
PermitRootLogin no
Match User backup
    PermitRootLogin yes
"""


def blocks(text, path="/etc/ssh/sshd_config"):
    return {path: H.match_blocks(text.splitlines())}


# ---------------------------------------------------------------------- parsing

def test_match_blocks_of_the_case():
    assert H.match_blocks(CASE.splitlines()) == [{"match": "Match User backup", "lines": ["PermitRootLogin yes"]}]


def test_a_block_runs_to_the_next_match_and_global_lines_are_not_blocks():
    text = ("Port 22\nMatch Group sftponly\n\tChrootDirectory /srv/sftp\n  ForceCommand   internal-sftp \n"
            "# a comment inside\n\nMatch all\nX11Forwarding no\n")
    assert H.match_blocks(text.splitlines()) == [
        {"match": "Match Group sftponly", "lines": ["ChrootDirectory /srv/sftp", "ForceCommand internal-sftp"]},
        {"match": "Match all", "lines": ["X11Forwarding no"]},
    ]


@pytest.mark.parametrize("raw, normal", [
    ("  PermitRootLogin\t yes  ", "PermitRootLogin yes"),
    ("PermitRootLogin=yes", "PermitRootLogin yes"),
    ("PermitRootLogin = yes", "PermitRootLogin yes"),
    ("AllowUsers  a   b", "AllowUsers a b"),
    ("   # PermitRootLogin yes", None),
    ("   ", None),
])
def test_sshd_line_normalises_whitespace_and_equals(raw, normal):
    assert H.sshd_line(raw) == normal


def test_keywords_compare_case_insensitively_arguments_as_written():
    assert H.sshd_line_key("PermitRootLogin yes") == H.sshd_line_key("permitrootlogin yes")
    assert H.sshd_line_key("Match User Backup") != H.sshd_line_key("Match User backup")
    assert H.match_blocks(["match user backup", "permitrootlogin yes"]) == [
        {"match": "match user backup", "lines": ["permitrootlogin yes"]}]


def test_check_output_parsed_per_file_and_cut_output_refused():
    data = ["F /etc/ssh/sshd_config", "L PermitRootLogin no", "L Match User backup", "L     PermitRootLogin yes",
            "F /etc/ssh/sshd_config.d/50-site.conf", "E"]
    assert H.sshd_match_blocks(data) == {
        "/etc/ssh/sshd_config": [{"match": "Match User backup", "lines": ["PermitRootLogin yes"]}],
        "/etc/ssh/sshd_config.d/50-site.conf": [],
    }
    assert H.sshd_match_blocks(data[:-1]) is None            # no end mark: cut by the line limit
    assert H.sshd_match_blocks(["L PermitRootLogin no", "E"]) is None  # a line before any file: malformed
    assert H.sshd_match_blocks(["F /x", "garbage", "E"]) is None
    assert H.sshd_match_blocks(["E", "F /x"]) is None
    assert H.sshd_match_blocks(["E"]) == {}


# ---------------------------------------------------------------------- findings

def test_the_case_fix_that_deletes_the_override_is_unhealthy_and_names_it():
    # sshd_disable_root_login's content fix: two PermitRootLogin lines -> both deleted, one inserted at BOF
    after = "PermitRootLogin no\nInclude /etc/ssh/sshd_config.d/*.conf\nKbdInteractiveAuthentication no\n" \
            "Match User backup\n"
    findings = H.match_findings(blocks(CASE), blocks(after))
    assert findings == [{"kind": "sshd_match", "path": "/etc/ssh/sshd_config", "shell": None, "user": None,
                         "what": "removed from the block 'Match User backup': PermitRootLogin yes",
                         "before": "PermitRootLogin yes", "after": "absent", "unhealthy": True}]


def test_a_changed_line_is_unhealthy_an_added_one_is_reported():
    after = CASE.replace("    PermitRootLogin yes", "    PermitRootLogin no\n    X11Forwarding no")
    findings = H.match_findings(blocks(CASE), blocks(after))
    assert [(f["what"], f["before"], f["after"], f["unhealthy"]) for f in findings] == [
        ("changed in the block 'Match User backup': PermitRootLogin yes -> PermitRootLogin no",
         "PermitRootLogin yes", "PermitRootLogin no", True),
        ("added to the block 'Match User backup' since the run began: X11Forwarding no",
         "absent", "X11Forwarding no", False),
    ]


def test_whitespace_case_of_keyword_and_order_are_not_changes():
    before = "Match Group sftponly\n    ChrootDirectory /srv/sftp\n    ForceCommand internal-sftp\n"
    after = "Match   Group sftponly\nforcecommand internal-sftp\n\tChrootDirectory=/srv/sftp\n"
    assert H.match_findings(blocks(before), blocks(after)) == []


def test_a_block_removed_or_moved_is_unhealthy_a_new_block_is_reported():
    other = "/etc/ssh/sshd_config.d/50-site.conf"
    before = dict(blocks(CASE), **blocks("", other))
    after = dict(blocks("PermitRootLogin no\n"), **blocks("Match User backup\n  PermitRootLogin yes\n", other))
    findings = H.match_findings(before, after)
    assert [(f["path"], f["unhealthy"], f["what"]) for f in findings] == [
        ("/etc/ssh/sshd_config", True, "the block 'Match User backup' was removed, with: PermitRootLogin yes"),
        (other, False, "the block 'Match User backup' was added since the run began, with: PermitRootLogin yes"),
    ]
    # a whole file gone takes its blocks with it
    assert [f["unhealthy"] for f in H.match_findings(before, {})] == [True]


def test_two_blocks_with_the_same_header_are_compared_in_order():
    before = "Match User a\n  X11Forwarding no\nMatch User a\n  PermitTTY no\n"
    after = "Match User a\n  X11Forwarding no\nMatch User a\n"
    assert [f["what"] for f in H.match_findings(blocks(before), blocks(after))] == [
        "removed from the block 'Match User a': PermitTTY no"]


def test_a_global_line_appended_after_the_last_block_lands_in_it_and_is_reported():
    # case sshd-match-block: a fix that appends at the end puts its directive inside the Match block
    findings = H.match_findings(blocks(CASE), blocks(CASE + "ClientAliveInterval 300\n"))
    assert [(f["what"], f["unhealthy"]) for f in findings] == [
        ("added to the block 'Match User backup' since the run began: ClientAliveInterval 300", False)]


def test_changing_a_line_an_earlier_attempt_added_is_not_held_against_the_later_attempt():
    # the baseline is what a human wrote before the run; an addition of this run may change later
    kept = CASE + "    X11Forwarding no\n"
    later = CASE + "    X11Forwarding yes\n"
    assert [f["unhealthy"] for f in H.match_findings(blocks(CASE), blocks(kept))] == [False]
    assert [(f["what"], f["unhealthy"]) for f in H.match_findings(blocks(CASE), blocks(later))] == [
        ("added to the block 'Match User backup' since the run began: X11Forwarding yes", False)]


# ---------------------------------------------------------------------- through the verdicts

def raw_of(name, rc, data):
    return H.RawCheck(rc=rc, data=list(data))


def baseline_with(match):
    return H.HostBaseline(user="scapforge", facts={}, active_units=[], pkgdb={}, results={}, commands=[],
                          files={}, taken_at=0.0, seconds=0.0, sshd_match=match)


def test_side_effect_findings_compare_only_when_the_baseline_read_the_blocks():
    data = ["F /etc/ssh/sshd_config", "L PermitRootLogin no", "L Match User backup", "E"]
    now = {"sshd_match": raw_of("sshd_match", 0, data)}
    found = [f for f in H.side_effect_findings(now, baseline_with(blocks(CASE))) if f["kind"] == "sshd_match"]
    assert [f["what"] for f in found] == ["removed from the block 'Match User backup': PermitRootLogin yes"]
    assert [f for f in H.side_effect_findings(now, baseline_with(None)) if f["kind"] == "sshd_match"] == []
    missing = H.side_effect_findings({}, baseline_with(blocks(CASE)))
    assert [(f["kind"], f["what"], f["unhealthy"]) for f in missing if "Match" in f["what"]] == [
        ("unverified", "no result line for sshd's Match blocks", True)]
    cut = H.side_effect_findings({"sshd_match": raw_of("sshd_match", 0, data[:-1])}, baseline_with(blocks(CASE)))
    assert [f["kind"] for f in cut if "sshd" in f["what"]] == ["unverified"]


def test_baseline_round_trip_and_an_old_dict_without_the_field():
    base = baseline_with(blocks(CASE))
    assert H.HostBaseline.from_dict(base.to_dict()) == base
    old = base.to_dict()
    del old["sshd_match"]
    assert H.HostBaseline.from_dict(old).sshd_match is None


# ---------------------------------------------------------------------- the real script part

def test_the_script_reads_the_files_and_the_glob(tmp_path, monkeypatch):
    main = tmp_path / "sshd_config"
    main.write_text(CASE)
    conf_d = tmp_path / "sshd_config.d"
    conf_d.mkdir()
    (conf_d / "50-site.conf").write_text("# site\nMatch Address 10.0.0.0/8\n\tPasswordAuthentication yes\n")
    (conf_d / "ignored.txt").write_text("Match User nobody\n")
    monkeypatch.setattr(H, "SSHD_CONFIG_FILES", (str(main),))
    monkeypatch.setattr(H, "SSHD_CONFIG_DIRS", (str(conf_d), str(tmp_path / "absent.d")))
    script = H.build_script(NONCE, ["sshd_match"], user="root")
    out = subprocess.run(["sh", "-c", script], capture_output=True, timeout=60, cwd="/", check=False).stdout.decode()
    raw, ended = H.parse_output(out, NONCE)
    assert ended and raw["sshd_match"].rc == 0
    assert H.sshd_match_blocks(raw["sshd_match"].data) == {
        str(main): [{"match": "Match User backup", "lines": ["PermitRootLogin yes"]}],
        str(conf_d / "50-site.conf"): [{"match": "Match Address 10.0.0.0/8", "lines": ["PasswordAuthentication yes"]}],
    }


def test_the_script_output_past_the_line_limit_is_not_compared(tmp_path, monkeypatch):
    main = tmp_path / "sshd_config"
    main.write_text("".join("AcceptEnv X%d\n" % i for i in range(60)))
    monkeypatch.setattr(H, "SSHD_CONFIG_FILES", (str(main),))
    monkeypatch.setattr(H, "SSHD_CONFIG_DIRS", ())
    monkeypatch.setattr(H, "MAX_SSHD_LINES", 50)
    script = H.build_script(NONCE, ["sshd_match"], user="root")
    out = subprocess.run(["sh", "-c", script], capture_output=True, timeout=60, cwd="/", check=False).stdout.decode()
    raw, _ended = H.parse_output(out, NONCE)
    assert len(raw["sshd_match"].data) == 50
    assert H.sshd_match_blocks(raw["sshd_match"].data) is None
