"""redact(): secrets out, ordinary configuration untouched.

Keys are generated at test time (cryptography) and tokens are assembled from pieces, so no
secret-looking literal sits in the repository. The hashes are of the word "secret".
"""

import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from ansible_collections.scapforge.remediation.plugins.plugin_utils.redact import KINDS, redact

SHA512 = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."
SHA256 = "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA"
MD5 = "$1$abc$iCQ2D3nhptRYi27fDYv2s1"
YESCRYPT = "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$GmcwIgvdUC9qLWcKCi6gklUa1dM3ziD43YxYNURLKy0"
BCRYPT = "$2b$12$HPEA2mLC50eD.mJIajsR2Ovm5n46ChDyJ9kW4SomsiTHrC81lZLHC"
ARGON2 = "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG"


def _openssh_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate()
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()


def _rsa_key(fmt) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


def test_openssh_private_key_block_is_replaced_whole():
    key = _openssh_key()
    text = f"$ cat /etc/ssh/ssh_host_ed25519_key\n{key}$ echo done\n"
    out, n = redact(text)
    assert n == 1
    assert out == "$ cat /etc/ssh/ssh_host_ed25519_key\n[REDACTED:private_key]\n$ echo done\n"


@pytest.mark.parametrize("fmt", [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL])
def test_pem_private_keys_are_replaced(fmt):
    key = _rsa_key(fmt)
    out, n = redact("before\n" + key + "after")
    assert (out, n) == ("before\n[REDACTED:private_key]\nafter", 1)


def test_pgp_private_key_block():
    block = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGZ0aWgBCAC7\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----"
    assert redact("key:\n" + block + "\nend") == ("key:\n[REDACTED:private_key]\nend", 1)


def test_a_cut_private_key_is_redacted_to_the_end():
    key = _openssh_key()
    cut = key[: len(key) // 2]
    out, n = redact("stdout: " + cut)
    assert (out, n) == ("stdout: [REDACTED:private_key]", 1)


def test_a_key_inside_json_escaped_text_is_found():
    key = _openssh_key().replace("\n", "\\n")
    out, n = redact('{"stdout": "' + key + '", "rc": 0}')
    assert (out, n) == ('{"stdout": "[REDACTED:private_key]\\n", "rc": 0}', 1)


def test_public_keys_and_certificates_are_kept():
    text = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDXfohctUJG6MVF2pADjiHfYX+Ay7pQnGS6mXJcfQKKd admin@ctl\n"
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA1d+iFy1Qkbox\n-----END PUBLIC KEY-----\n"
    )
    assert redact(text) == (text, 0)


def test_shadow_file_keeps_everything_but_the_hashes():
    shadow = (
        "root:" + SHA512 + ":19700:0:99999:7:::\n"
        "daemon:*:19700:0:99999:7:::\n"
        "scapforge:!:19700:0:99999:7:::\n"
        "olduser:!" + YESCRYPT + ":19700:0:99999:7::19800:\n"
        "nopass::19700:0:99999:7:::\n"
        "legacy:abJnggxhB/yWI:19700:0:99999:7:::\n"
    )
    out, n = redact(shadow)
    assert n == 3
    assert out == (
        "root:[REDACTED:password_hash]:19700:0:99999:7:::\n"
        "daemon:*:19700:0:99999:7:::\n"
        "scapforge:!:19700:0:99999:7:::\n"
        "olduser:![REDACTED:password_hash]:19700:0:99999:7::19800:\n"
        "nopass::19700:0:99999:7:::\n"
        "legacy:[REDACTED:password_hash]:19700:0:99999:7:::\n"
    )


@pytest.mark.parametrize("hashed", [SHA512, SHA256, MD5, YESCRYPT, BCRYPT, ARGON2])
def test_crypt_hashes_anywhere(hashed):
    text = f"usermod -p '{hashed}' alice"
    assert redact(text) == ("usermod -p '[REDACTED:password_hash]' alice", 1)


def test_oval_shadow_item_password_element():
    item = (
        '<shadow_item id="1"><username>root</username><password>' + SHA512 + "</password></shadow_item>"
        '<shadow_item id="2"><username>bin</username><password>*</password></shadow_item>'
        '<unix-sys:password datatype="string">abJnggxhB/yWI</unix-sys:password>'
    )
    out, n = redact(item)
    assert n == 2
    assert "<password>[REDACTED:password_hash]</password>" in out
    assert "<password>*</password>" in out
    assert '<unix-sys:password datatype="string">[REDACTED:password_hash]</unix-sys:password>' in out


def test_grub_pbkdf2_hash():
    line = "password_pbkdf2 root grub.pbkdf2.sha512.10000.5A0F1B2C.9E8D7C6B5A4F"
    assert redact(line) == ("password_pbkdf2 root [REDACTED:password_hash]", 1)


def test_bearer_and_api_tokens():
    openai_key = "sk-" + "proj-" + "Ab3dEf6hIj9kLmN0pQrStUvWxYz12345"
    github = "gh" + "p_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    aws = "AK" + "IA" + "IOSFODNN7EXAMPLE"
    jwt = (
        "eyJhbGciOiJIUzI1NiJ9"
        + "."
        + "eyJzdWIiOiIxMjM0NTY3ODkwIn0"
        + "."
        + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    )
    text = (
        f"Authorization: Bearer {openai_key}\n"
        f"OPENAI_API_KEY={openai_key}\n"
        f"git clone https://x:{github}@github.com/o/r\n"
        f"aws_access_key_id = {aws}\n"
        f"cookie: session={jwt}\n"
    )
    out, n = redact(text)
    assert n == 5
    assert out == (
        "Authorization: Bearer [REDACTED:bearer_token]\n"
        "OPENAI_API_KEY=[REDACTED:api_token]\n"
        "git clone https://x:[REDACTED:api_token]@github.com/o/r\n"
        "aws_access_key_id = [REDACTED:api_token]\n"
        "cookie: session=[REDACTED:jwt]\n"
    )


def test_password_assignments_in_several_syntaxes():
    text = (
        "password=hunter2\n"
        "ansible_become_password: 'S3cr3t!'\n"
        '{"db_passwd": "tr0ub4dor", "user": "app"}\n'
        "client_secret = abc123def\n"
        'Acquire::http::Proxy "http://proxyuser:pr0xyPass@10.87.1.1:8888";\n'
    )
    out, n = redact(text)
    assert n == 5
    assert out == (
        "password=[REDACTED:password]\n"
        "ansible_become_password: '[REDACTED:password]'\n"
        '{"db_passwd": "[REDACTED:password]", "user": "app"}\n'
        "client_secret = [REDACTED:password]\n"
        'Acquire::http::Proxy "http://proxyuser:[REDACTED:url_password]@10.87.1.1:8888";\n'
    )


def test_references_to_secrets_are_not_secrets():
    text = (
        'ansible_become_password: "{{ vault_become_pass }}"\n'
        "password=$DB_PASSWORD\n"
        "update_password: on_create\n"
        "api_key: null\n"
    )
    assert redact(text) == (text, 0)


SSHD_CONFIG = """\
Include /etc/ssh/sshd_config.d/*.conf
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin no
PasswordAuthentication no
PermitEmptyPasswords no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
KbdInteractiveAuthentication no
Ciphers aes256-gcm@openssh.com,chacha20-poly1305@openssh.com
ClientAliveInterval 300
"""

LOGIN_DEFS = """\
PASS_MAX_DAYS	60
PASS_MIN_DAYS	1
PASS_WARN_AGE	7
ENCRYPT_METHOD SHA512
SHA_CRYPT_MIN_ROUNDS 5000
UMASK		077
"""

PAM_AND_PWQUALITY = """\
password	requisite			pam_pwquality.so retry=3
password	[success=1 default=ignore]	pam_unix.so obscure use_authtok try_first_pass yescrypt remember=5
auth	required	pam_faillock.so preauth silent deny=3 unlock_time=900
minlen = 14
dcredit = -1
"""

AUDIT_RULES = """\
-a always,exit -F arch=b64 -S execve -C uid!=euid -F euid=0 -k setuid
-w /etc/shadow -p wa -k identity
-w /etc/passwd -p wa -k identity
-a always,exit -F path=/usr/bin/passwd -F perm=x -F auid>=1000 -F auid!=unset -F key=privileged
-e 2
"""

AIDE_CONF = """\
database_in=file:/var/lib/aide/aide.db
NORMAL = p+i+n+u+g+s+m+c+acl+xattrs+sha512
/etc/shadow NORMAL
# sha512sum of the database
9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a089f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  /var/lib/aide/aide.db
"""

PASSWD = """\
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
scapforge:x:1000:1000::/home/scapforge:/bin/bash
"""

VENDOR_FIX = """\
- name: Set accounts_password_set_max_life_existing
  ansible.builtin.command: chage -M {{ var_accounts_maximum_age_login_defs }} {{ item }}
  with_items: '{{ user_names.stdout_lines }}'
- name: 'Set var_password_pam_minlen'
  set_fact:
    var_password_pam_minlen: '14'
"""


@pytest.mark.parametrize(
    "text",
    [SSHD_CONFIG, LOGIN_DEFS, PAM_AND_PWQUALITY, AUDIT_RULES, AIDE_CONF, PASSWD, VENDOR_FIX],
    ids=["sshd_config", "login.defs", "pam", "audit.rules", "aide.conf", "passwd", "vendor_fix"],
)
def test_ordinary_configuration_is_untouched(text):
    assert redact(text) == (text, 0)


def test_redaction_is_idempotent_and_kinds_are_known():
    text = "root:" + SHA512 + ":19700:0:99999:7:::\npassword=x1\n" + _openssh_key()
    once, n = redact(text)
    assert n == 3
    assert redact(once) == (once, 0)
    import re

    assert set(re.findall(r"\[REDACTED:(\w+)\]", once)) <= set(KINDS)


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000,
        "https:" + "/" * 100_000,
        "-----BEGIN " * 20_000,
        "$6$" * 50_000,
        "password=" * 20_000,
        "x:" * 100_000,
    ],
)
def test_large_adversarial_text_is_fast(text):
    started = time.monotonic()
    redact(text)
    assert time.monotonic() - started < 1.0


def test_non_text_is_refused():
    with pytest.raises(TypeError):
        redact(b"password=x")
