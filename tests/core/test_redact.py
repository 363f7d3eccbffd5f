"""Table-driven redaction: what must go, and ordinary text that must stay exactly as it is."""

from __future__ import annotations

import pytest

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.redact import REDACTED, Redactor

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq1w2\nabcdEFGH1234\n-----END RSA PRIVATE KEY-----"

# (case name, input, secret that must disappear, text that must remain)
MUST_REDACT = [
    ("openai key", "key is sk-abcdefghijklmnopqrstuvwx0123 ok", "sk-abcdefghijklmnopqrstuvwx0123", "key is "),
    ("openai project key", "sk-proj-AbCdEf012345_ghijklmnopQRSTUV-xyz", "AbCdEf012345_ghijklmnop", ""),
    ("aws access key id", "aws id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", "aws id "),
    ("aws secret assignment", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "wJalrXUtnFEMI", "aws_secret_access_key = "),
    ("github classic token", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6g7H8", ""),
    ("github fine-grained token", "token github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
     "github_pat_11ABCDEFG", ""),
    ("slack bot token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKl", "1234567890123-AbCdEf", ""),
    ("hugging face token", "HF hf_abcdefghijklmnopqrstuvwxyzABCDEF1234", "hf_abcdefghijklmnopqrstuvwxyz", "HF "),
    ("bearer header", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9abcdefghij", "eyJhbGciOiJIUzI1NiJ9",
     "Authorization: Bearer "),
    ("jwt alone", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
     "SflKxwRJSMeKKF2QT4fw", ""),
    ("pem private key", f"key:\n{PEM}\nafter", "MIIEowIBAAKCAQEAq1w2", "after"),
    ("pem key cut short", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B", "MIIEvQIBADANBgkq", ""),
    ("password in url", "postgres://admin:s3cr3tPass@db.example.com:5432/app", "s3cr3tPass",
     "postgres://admin:[REDACTED]@db.example.com:5432/app"),
    ("redis url without user", "redis://:hunter2@cache:6379/0", "hunter2", "redis://:[REDACTED]@cache:6379/0"),
    ("password assignment", "password=hunter2", "hunter2", "password="),
    ("quoted password in code", 'db.connect(user="bob", password="correct horse")', "correct horse",
     'db.connect(user="bob", password='),
    ("env token", "export GITHUB_TOKEN=abc123def456", "abc123def456", "export GITHUB_TOKEN="),
    ("json api key", '{"api_key": "live-98765-xyz", "model": "gpt"}', "live-98765-xyz", '"model": "gpt"'),
    ("connection string", "Server=db;Database=x;Pwd=Tr0ub4dor&3;", "Tr0ub4dor", "Server=db;Database=x;Pwd="),
    ("secret colon", "client_secret: 8f7e6d5c4b3a", "8f7e6d5c4b3a", "client_secret: "),
    ("stripe live key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc", ""),
    ("google api key", "AIzaSyA-1234567890abcdefghijklmnopqrstu", "SyA-1234567890abcdef", ""),
]

MUST_KEEP = [
    ("plain prose", "The token count was 512 and the password policy is strict."),
    ("max_tokens argument", "model.generate(max_tokens=512, temperature=0.2)"),
    ("token from a function call", "token = tokenizer.encode(text)"),
    ("url with port and no credentials", "https://example.com:8080/path?q=1"),
    ("url with user only", "ssh://git@github.com/org/repo.git"),
    ("short sk- word", "scikit-learn is imported as sk-learn sometimes"),
    ("task- prefix", "task-abcdefghijklmnopqrstuvwxyz0123456789"),
    ("uuid", "run 5b0f3c1e-8f7d-4b8e-9a57-2f1c3e4d5a6b finished"),
    ("hex digest", "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("code with secret-ish names", "secret_sauce_count = len(items)\nprint(password_policy)"),
    ("json looking observation", '{"rows": 3, "columns": ["a", "b"]}'),
    ("pem public key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqh\n-----END PUBLIC KEY-----"),
]


@pytest.mark.parametrize(("name", "text", "secret", "kept"), MUST_REDACT, ids=[c[0] for c in MUST_REDACT])
def test_secret_is_redacted(name, text, secret, kept):
    out = Redactor().redact(text)
    assert secret not in out
    assert REDACTED in out
    assert kept in out


@pytest.mark.parametrize(("name", "text"), MUST_KEEP, ids=[c[0] for c in MUST_KEEP])
def test_ordinary_text_is_left_alone(name, text):
    assert Redactor().redact(text) == text


def test_extra_patterns_from_settings():
    redactor = Redactor([r"ACME-\d{6}", r"(?i)internal\.corp\.example"])
    out = redactor.redact("ticket ACME-123456 on INTERNAL.corp.example, not ACME-12")
    assert out == f"ticket {REDACTED} on {REDACTED}, not ACME-12"


def test_invalid_extra_pattern_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="not a valid regex"):
        Redactor(["(unclosed"])


def test_several_secrets_in_one_text():
    text = "OPENAI=sk-abcdefghijklmnopqrstuvwx0123 and AKIAIOSFODNN7EXAMPLE and password: hunter22"
    out = Redactor().redact(text)
    assert "sk-abcdef" not in out and "AKIAIOSFODNN7" not in out and "hunter22" not in out
    assert out.count(REDACTED) == 3
