"""Remove secrets from text before it leaves the controller for an LLM endpoint.

What an LLM sees (OVAL collected items, file contents a probe read, task output) can hold a
host's secrets: /etc/shadow lines, SSH host keys, tokens in environment files. Each secret
found is replaced by ``[REDACTED:<kind>]``; the rest of the text is kept byte for byte, so
what a rule checks (an empty or locked password field, ``PermitEmptyPasswords no``, a
``sha512`` checksum in aide.conf) stays visible.

Kinds (closed list, see ``KINDS``):

- ``private_key``: PEM/OpenSSH/PGP private key blocks (an unterminated block is redacted
  to the end of the text: it was cut, not harmless);
- ``password_hash``: crypt(3) hashes as found in /etc/shadow (``$1$`` MD5, ``$5$``/``$6$``
  SHA-crypt, ``$y$``/``$gy$``/``$7$`` yescrypt/scrypt, ``$2a$``/``$2b$``/``$2y$`` bcrypt,
  ``$argon2id$``...), the hash field of a whole shadow line (DES hashes included; lock
  marks ``!``/``*`` before it are kept), the content of an OVAL shadow_item's
  ``<password>`` element, GRUB ``grub.pbkdf2.sha512...`` hashes;
- ``bearer_token``: the credential of ``Authorization: Bearer|Basic|Token ...`` and of a
  bare ``Bearer <token>``;
- ``api_token``: ``sk-...`` (OpenAI style), GitHub ``ghp_``/``gho_``/``ghu_``/``ghs_``/
  ``ghr_``/``github_pat_``, GitLab ``glpat-``, Slack ``xox?-``, AWS access key ids
  (``AKIA``/``ASIA``);
- ``jwt``: JSON Web Tokens (``eyJ...``.``eyJ...``.signature);
- ``url_password``: the password of ``scheme://user:password@host``;
- ``password``: the value of an assignment whose key names a secret (``password=``,
  ``passwd:``, ``"api_key": "..."``, ``client_secret = ...``); values that are references
  (``{{ var }}``, ``$VAR``), booleans/null and scan results (``grub2_password: fail``) are
  not secrets and are kept.

Identifiers are never secrets: OVAL ids (``oval:ssg-..._common_password:tst:1``), XCCDF ids
(``xccdf_org.ssgproject.content_rule_grub2_password``) and absolute paths
(``/etc/pam.d/common-password``) are set aside before the ``password`` kind is looked for,
so that a name ending in a secret word followed by ``:`` is not taken for an assignment.

Formats: crypt(3) and shadow(5) man pages, the PEM/RFC 7468 labels, the token prefixes
documented by their issuers (GitHub, GitLab, AWS, Slack, OpenAI).
"""

from __future__ import annotations

import re

KINDS = (
    "private_key",
    "password_hash",
    "bearer_token",
    "api_token",
    "jwt",
    "url_password",
    "password",
)

_B64 = r"[./0-9A-Za-z]"  # the crypt(3) alphabet

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----(?:.*?-----END \1PRIVATE KEY\2-----|.*\Z)",
    re.DOTALL,
)

#: shadow(5): name:hash:lastchg:min:max:warn:inactive:expire:reserved
_SHADOW_LINE = re.compile(
    r"^(?P<head>[A-Za-z0-9_][A-Za-z0-9_.-]*\$?:)(?P<locks>[!*]*)(?P<hash>[^:\n]*)"
    r"(?P<tail>(?::\d*){5}:\d*:[^:\n]*)$",
    re.MULTILINE,
)

_CRYPT_HASH = re.compile(
    r"(?<![\w$])(?:"
    rf"\$1\${_B64}{{1,8}}\${_B64}{{22}}"
    rf"|\$[56]\$(?:rounds=\d+\$)?{_B64}{{1,16}}\${_B64}{{43,86}}"
    rf"|\$2[abxy]\$\d\d\${_B64}{{53}}"
    rf"|\$(?:y|gy|7)\${_B64}+\${_B64}*\${_B64}{{43}}"
    r"|\$argon2(?:id|i|d)\$(?:v=\d+\$)?m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+"
    r"|grub\.pbkdf2\.sha512\.\d+\.[0-9A-Fa-f]+\.[0-9A-Fa-f]+"
    r")(?![\w$])"
)

_AUTH_HEADER = re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)([A-Za-z0-9._~+/=-]+)")
_BARE_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")

_API_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-[A-Za-z0-9_-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|github_pat_[A-Za-z0-9_]{22,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r")(?![A-Za-z0-9_-])"
)

_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")

_URL_PASSWORD = re.compile(r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)(@)", re.IGNORECASE)

#: keys that name a secret: the key must END with one of these words (``var_password_pam_minlen``
#: does not; ``ansible_become_password`` does).
_SECRET_KEY = (
    r"[A-Za-z0-9_.-]*?(?:password|passwd|passphrase|secret|api[_-]?key|access[_-]?key"
    r"|secret[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|private[_-]?key)"
)
_ASSIGNMENT = re.compile(
    rf"(?i)(?<![A-Za-z0-9_.-])(?P<q>[\"']?)(?P<key>{_SECRET_KEY})(?P=q)(?P<sep>[ \t]*[:=][ \t]*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;\"'}]+)"
)
#: an OVAL shadow_item's password element (``<unix-sys:password>...</unix-sys:password>``).
_XML_PASSWORD = re.compile(r"(<(?:[A-Za-z0-9_.-]+:)?password(?:\s[^<>]*)?>)([^<]*)(</)")

#: values of such keys that are settings, not secrets (``update_password: on_create``).
_NOT_SECRET_VALUES = frozenset(
    {"", "yes", "no", "true", "false", "on", "off", "none", "null", "~", "*", "!", "x", "always", "on_create"}
)
#: XCCDF and OVAL result words: what ``<rule or test id>: <result>`` says, never a password.
_RESULT_WORDS = frozenset(
    {"pass", "fail", "error", "unknown", "notapplicable", "notchecked", "notselected", "informational", "fixed"}
)
_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\([A-Za-z_][A-Za-z0-9_]*\)s")


def _placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _is_reference(value: str) -> bool:
    """A value that names a secret held elsewhere rather than being one."""
    inner = value.strip("\"'")
    return (
        inner.lower() in _NOT_SECRET_VALUES
        or inner.lower() in _RESULT_WORDS
        or inner.startswith(("{{", "[REDACTED:"))
        or inner.endswith("}}")
        or _VARIABLE.fullmatch(inner) is not None
    )


def _keep_or(kind: str, group: int = 0, prefix: int | None = None, suffix: int | None = None):
    """A replacer: the whole match (or group ``group`` framed by groups ``prefix``/``suffix``)
    becomes the placeholder, unless the secret part is a reference (then None: keep)."""

    def replace(match: re.Match) -> str | None:
        if group and _is_reference(match.group(group)):
            return None
        head = match.group(prefix) if prefix else ""
        tail = match.group(suffix) if suffix else ""
        return head + _placeholder(kind) + tail

    return replace


def _shadow(match: re.Match) -> str | None:
    hashed = match.group("hash")
    if not hashed or hashed.startswith("[REDACTED:"):
        return None  # no password, or only lock marks: what the rules check, not a secret
    return match.group("head") + match.group("locks") + _placeholder("password_hash") + match.group("tail")


def _xml_password(match: re.Match) -> str | None:
    locks = re.match(r"[!*]*", match.group(2)).group(0)
    hashed = match.group(2)[len(locks) :]
    if not hashed or hashed.startswith("[REDACTED:"):
        return None
    return match.group(1) + locks + _placeholder("password_hash") + match.group(3)


def _assignment(match: re.Match) -> str | None:
    value = match.group("value")
    if _is_reference(value):
        return None
    quote = value[0] if value[:1] in "\"'" else ""
    return (
        match.group("q")
        + match.group("key")
        + match.group("q")
        + match.group("sep")
        + quote
        + _placeholder("password")
        + quote
    )


# Order matters: whole blocks and whole lines first, so that their insides are not
# counted again by the narrower patterns that follow.
_RULES = (
    (_PRIVATE_KEY, _keep_or("private_key")),
    (_SHADOW_LINE, _shadow),
    (_CRYPT_HASH, _keep_or("password_hash")),
    (_XML_PASSWORD, _xml_password),
    (_AUTH_HEADER, _keep_or("bearer_token", group=2, prefix=1)),
    (_BARE_BEARER, _keep_or("bearer_token", group=2, prefix=1)),
    (_JWT, _keep_or("jwt")),
    (_API_TOKEN, _keep_or("api_token")),
    (_URL_PASSWORD, _keep_or("url_password", group=2, prefix=1, suffix=3)),
)

#: What names a thing and so is never a secret, though it may end in ``password`` and be
#: followed by ``:``: OVAL ids, XCCDF ids, absolute paths (not the path of a URL, whose
#: slash follows a host name or ``:``; not a crypt salt, whose slash follows ``$``).
_IDENTIFIER = re.compile(
    r"(?<![\w.-])oval:[A-Za-z0-9_.-]+:(?:def|tst|obj|ste|var):\d+"
    r"|(?<![\w.-])xccdf_[A-Za-z0-9_.-]+"
    r"|(?<![\w.$:/~@%+-])/(?:[\w.+@*-]+/)*[\w.+@*-]+"
)
#: Private-use characters frame an identifier set aside (``\ue000<n>\ue001``); a text that
#: already holds them is searched as it is.
_HOLD_OPEN, _HOLD_CLOSE = "\ue000", "\ue001"
_HELD = re.compile(_HOLD_OPEN + r"(\d+)" + _HOLD_CLOSE)


def redact(text: str) -> tuple[str, int]:
    """Replace the secrets in ``text`` with ``[REDACTED:<kind>]``.

    Returns ``(new_text, replacements)``; ``replacements`` counts the secrets replaced
    (0 when the text is returned unchanged). Idempotent: redacting the result again
    replaces nothing. Raises TypeError when ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"redact() wants a str, got {type(text).__name__}")
    total = 0

    def apply(pattern: re.Pattern, replacer, text: str) -> str:
        def substitute(match: re.Match) -> str:
            nonlocal total
            new = replacer(match)
            if new is None:
                return match.group(0)
            total += 1
            return new

        return pattern.sub(substitute, text)

    for pattern, replacer in _RULES:
        text = apply(pattern, replacer, text)
    held: list[str] = []
    if _HOLD_OPEN not in text and _HOLD_CLOSE not in text:
        text = _IDENTIFIER.sub(lambda m: _hold(held, m.group(0)), text)
    text = apply(_ASSIGNMENT, _assignment, text)
    return _HELD.sub(lambda m: held[int(m.group(1))], text), total


def _hold(held: list[str], identifier: str) -> str:
    held.append(identifier)
    return f"{_HOLD_OPEN}{len(held) - 1}{_HOLD_CLOSE}"
