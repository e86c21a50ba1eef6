"""redact() as properties (hypothesis): identifiers and configuration from the real datastream
survive whatever surrounds them, and generated secrets never survive, wherever they sit.

The identifiers are every OVAL id of ssg-debian12-ds.xml (5,235, among them the 27 that end in
``passwd``/``password``/``private_key``), the absolute paths its OVAL objects and descriptions
name, and the configuration lines of its descriptions (``<pre>``) and fixes that mention a
password, a key, a secret or a token. The datastream is the one ``lab/lab.py build`` writes
(``$SCAPFORGE_LAB_HOME/content``, as the other unit tests that read it).
"""

from __future__ import annotations

import functools
import os
import re
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from ansible_collections.scapforge.remediation.plugins.plugin_utils.redact import redact

DATASTREAM = Path(os.environ.get("SCAPFORGE_LAB_HOME", "/var/lib/scapforge-lab"), "content", "ssg-debian12-ds.xml")
PATH = re.compile(r"/[\w./+@-]+")
SECRET_WORD = re.compile(r"(?i)passw|secret|key|token")
CRYPT = string.ascii_letters + string.digits + "./"
#: what follows an identifier in a prompt: a result, an error, a grep line number, a YAML value
AFTER = ["", ": fail", ": pass", ":3:", ": No such file or directory", " = true", ": notchecked", "\n", " (false)",
         ": does not exist"]
BEFORE = ["", " ", "test: ", "object_ref=", "- ", '"', "cannot open ", "path=", "\t"]
QUICK = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.lru_cache(maxsize=1)
def samples() -> dict:
    if not DATASTREAM.is_file():
        pytest.fail("%s missing: run `make lab-build`" % DATASTREAM)
    tree = etree.parse(str(DATASTREAM))
    oval = sorted({i for i in tree.xpath("//@id") if i.startswith("oval:")})
    paths = set()
    for element in tree.xpath("//*[local-name()='filepath' or local-name()='path' or local-name()='filename'"
                              " or local-name()='code']"):
        text = "".join(element.itertext()).strip()
        if PATH.fullmatch(text):
            paths.add(text)
    lines = set()
    for element in tree.xpath("//*[local-name()='pre' or local-name()='fix']"):
        for line in "".join(element.itertext()).splitlines():
            if SECRET_WORD.search(line) and line.strip():
                lines.add(line.strip())
    return {"oval": oval, "paths": sorted(paths), "lines": sorted(lines)}


def test_the_datastream_holds_the_identifiers_that_were_redacted():
    found = samples()
    assert len(found["oval"]) > 5000
    assert "oval:ssg-test_password_pam_pwquality_retry_common_password:tst:1" in found["oval"]
    assert "/etc/pam.d/common-password" in found["paths"]
    assert any(line.startswith("password") and "pam_pwquality.so" in line for line in found["lines"])
    assert len(found["lines"]) > 300


def test_the_five_false_positives_of_the_trial_are_kept():
    text = ("test oval:ssg-test_password_pam_pwquality_retry_common_password:tst:1: false\n"
            "object oval:ssg-obj_password_pam_pwquality_retry_common_password:obj:1: no item matched\n"
            "/etc/pam.d/common-password:25:password requisite pam_pwquality.so retry=3\n"
            "xccdf_org.ssgproject.content_rule_grub2_password: fail\n"
            "grub2_password: notchecked\n")
    assert redact(text) == (text, 0)


def identifiers():
    # deferred: the datastream is read when a test runs, not when the module is collected
    return st.deferred(lambda: st.one_of(st.sampled_from(samples()["oval"]), st.sampled_from(samples()["paths"])))


def framed_identifier():
    return st.tuples(st.sampled_from(BEFORE), identifiers(), st.sampled_from(AFTER))


@QUICK
@given(st.lists(framed_identifier(), min_size=1, max_size=8), st.sampled_from([" ", "\n", ", ", "; "]))
def test_identifiers_survive_any_framing(pieces, glue):
    text = glue.join(before + ident + after for before, ident, after in pieces)
    out, n = redact(text)
    assert (out, n) == (text, 0)


@QUICK
@given(st.lists(st.deferred(lambda: st.sampled_from(samples()["lines"])), min_size=1, max_size=10))
def test_configuration_lines_of_the_datastream_survive(lines):
    text = "\n".join(lines) + "\n"
    assert redact(text) == (text, 0)


def _crypt(size: int):
    return st.text(CRYPT, min_size=size, max_size=size)


@st.composite
def secrets(draw) -> tuple[str, str]:
    """(text holding a secret, the secret part that must not survive)."""
    kind = draw(st.sampled_from(["sha512", "yescrypt", "shadow", "pem", "openai", "github", "aws", "jwt",
                                 "assignment", "json", "bearer"]))
    value = draw(st.text(string.ascii_letters + string.digits + "!@#%^&*+-_", min_size=12, max_size=30))
    if kind == "sha512":
        secret = "$6$%s$%s" % (draw(_crypt(16)), draw(_crypt(86)))
        return "usermod -p '%s' alice" % secret, secret
    if kind == "yescrypt":
        secret = "$y$j9T$%s$%s" % (draw(_crypt(22)), draw(_crypt(43)))
        return secret, secret
    if kind == "shadow":
        secret = "$5$%s$%s" % (draw(_crypt(8)), draw(_crypt(43)))
        return "root:%s:19700:0:99999:7:::" % secret, secret
    if kind == "pem":
        body = draw(st.text(string.ascii_letters + string.digits + "+/", min_size=64, max_size=64))
        return "-----BEGIN OPENSSH PRIVATE KEY-----\n%s\n-----END OPENSSH PRIVATE KEY-----" % body, body
    if kind == "openai":
        secret = "sk-" + draw(st.text(string.ascii_letters + string.digits, min_size=24, max_size=48))
        return "OPENAI_API_KEY=" + secret, secret
    if kind == "github":
        secret = "gh" + "p_" + draw(st.text(string.ascii_letters + string.digits, min_size=36, max_size=36))
        return "token " + secret, secret
    if kind == "aws":
        secret = "AK" + "IA" + draw(st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16))
        return "aws_access_key_id = " + secret, secret
    if kind == "jwt":
        part = st.text(string.ascii_letters + string.digits + "_-", min_size=10, max_size=40)
        secret = "eyJ%s.eyJ%s.%s" % (draw(part), draw(part), draw(part))
        return "cookie: session=" + secret, secret
    key = draw(st.sampled_from(["password", "db_passwd", "client_secret", "ansible_become_password", "api_key"]))
    if kind == "json":
        return '{"%s": "%s"}' % (key, value), value
    if kind == "bearer":
        token = draw(st.text(string.ascii_letters + string.digits + "._~+/-", min_size=16, max_size=40))
        return "Authorization: Bearer " + token, token
    return "%s=%s" % (key, value), value


@QUICK
@given(st.lists(framed_identifier(), min_size=0, max_size=5), secrets(), st.integers(0, 5),
       st.sampled_from([" ", "\n"]))
def test_secrets_never_survive_next_to_identifiers(pieces, secret, where, glue):
    text, part = secret
    words = [before + ident + after for before, ident, after in pieces]
    words.insert(min(where, len(words)), text)
    out, n = redact(glue.join(words))
    assert part not in out
    assert n >= 1
    for _before, ident, _after in pieces:
        assert ident in out


def test_a_secret_after_a_path_or_an_id_is_still_removed():
    text = "/etc/app/app.conf:password=hunter2xyz oval:ssg-x_password:tst:1 client_secret: s3cr3tValue\n"
    assert redact(text) == ("/etc/app/app.conf:password=[REDACTED:password] oval:ssg-x_password:tst:1 "
                            "client_secret: [REDACTED:password]\n", 2)
