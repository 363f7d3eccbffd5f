"""Property tests for the redactor: it never raises, is idempotent, only ever replaces whole spans of the input
with one mark each, leaves prose alone, and removes a secret wherever in random text it is put."""

from __future__ import annotations

import base64
import dataclasses
import re
import string

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lessonbank.core.redact import REDACTED, Redactor

REDACTOR = Redactor()
# The same rules run on every text (the AWS secret key keeps its triggers: words near the key, not in it).
UNGATED = Redactor()
UNGATED.rules = tuple(rule if rule.name == "aws_secret_access_key" else dataclasses.replace(rule, triggers=())
                      for rule in UNGATED.rules)
FUZZ = settings(max_examples=300, deadline=None)

# Pieces of the rules' syntax, so random text often comes close to (or into) a secret.
FRAGMENTS = (
    "sk-", "sk-proj-", "ghp_", "github_pat_", "AKIA", "eyJ", "xoxb-", "hf_", "AIza", "glpat-", "npm_", "SG.",
    "token", "password", "passphrase", "pw", "pwd", "secret", "api_key", "apikey", "sig", "credentials", "key-",
    "://", "@", ":", ": ", "=", "==", "=>", ":=", '"', "'", "`", "\\\"", "(", ")", "[", "]", "{", "}", ",", ";",
    "&", "/", "-", "_", ".", " ", "\n", "\t", "--password ", "Bearer ", "Authorization: ", "aws ",
    "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "4111 1111 1111 1111", "4111111111111111",
    "hooks.slack.com/services/", "discord.com/api/webhooks/", "123456789:", "[REDACTED]", "self.", "str", "<x>",
    "${X}", "Q~", "-us1", "whsec_", "ya29.", "AC", "SK", "r8_", "gsk_", "pplx-", "xai-", "nvapi-", "lsv2_pt_", "dapi",
    "shpat_", "dop_v1_", "sq0atp-", "PMAK-", "ATATT", "rk_live_", "xapp-", "hvs.", "PuTTY-User-Key-File-2:", "AKIA",
    "ASIA", "0123456789abcdef", "authorization",
)
CHARS = string.ascii_letters + string.digits + "_-=:\"'/@. \n+~"
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(CHARS, max_size=12), max_size=30).map("".join)


@FUZZ
@given(texts)
def test_redaction_is_idempotent(text):
    once = REDACTOR.redact(text)
    assert REDACTOR.redact(once) == once


@FUZZ
@given(texts)
def test_output_is_the_input_with_whole_spans_replaced(text):
    assume(REDACTED not in text)
    out = REDACTOR.redact(text)
    pieces = out.split(REDACTED)
    assert text.startswith(pieces[0]) and text.endswith(pieces[-1])
    position = len(pieces[0])
    for piece in pieces[1:]:  # every kept piece is copied from the input, in order, after a non-empty cut
        found = text.find(piece, position + 1)
        assert found > position
        position = found + len(piece)
    assert REDACTED + REDACTED not in out  # touching findings become one mark
    assert out == text or REDACTOR.has_secret(text)


@settings(max_examples=1000, deadline=None)
@given(texts, st.sampled_from((str, str.upper, str.lower, str.swapcase)))
def test_skipping_the_rules_whose_triggers_are_absent_changes_nothing(text, case):
    text = case(text)
    assert REDACTOR.redact(text) == UNGATED.redact(text)


@FUZZ
@given(st.text(string.ascii_letters + " ,.!?'\n", max_size=400))
def test_prose_is_left_alone(text):
    assert REDACTOR.redact(text) == text
    assert not REDACTOR.has_secret(text)


ALNUM = string.ascii_letters + string.digits


def _body(alphabet: str, size: int) -> st.SearchStrategy[str]:
    # at least one upper, one lower and one digit, so a body is never a plain word or a placeholder
    return st.text(alphabet, min_size=size - 3, max_size=size - 3).map(lambda s: s + "Aa7")


def _luhn_complete(digits: str) -> str:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return digits + str((10 - total % 10) % 10)


PASSWORD_CHARS = ALNUM + "!#$%*+-./:=?@^_~"
# (the secret as it appears, the part that must disappear)
SECRETS = st.one_of(
    _body(ALNUM + "_-", 40).map(lambda b: ("sk-proj-" + b, b)),
    _body(ALNUM, 36).map(lambda b: ("ghp_" + b, b)),
    st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(lambda b: ("AKIA" + b, b)),
    _body(ALNUM, 34).map(lambda b: ("hf_" + b, b)),
    _body(ALNUM, 24).map(lambda b: ("xoxb-1234567890-" + b, b)),
    st.tuples(_body(ALNUM + "_-", 20), _body(ALNUM + "_-", 30)).map(
        lambda p: (f"eyJ{p[0]}.eyJ{p[1]}.{p[1][::-1]}", p[1][::-1])),
    st.binary(min_size=64, max_size=64).map(lambda b: base64.b64encode(b).decode()).map(
        lambda k: (f"AccountName=x;AccountKey={k};EndpointSuffix=core.windows.net", k)),
    # a password that starts like a port (``:8080/``) or holds '://' is read as a URL path (documented)
    _body(PASSWORD_CHARS, 12).filter(lambda p: "://" not in p and not re.match(r"[0-9]{1,5}[/?#]", p)).map(
        lambda p: (f"postgres://app:{p}@db.internal:5432/app", p)),
    _body(PASSWORD_CHARS + " ", 14).map(lambda p: (f'password="{p}"', p)),
    # unquoted, '==' is a comparison and 'env.X' a reference (documented)
    _body(PASSWORD_CHARS, 14).filter(lambda p: p[0] != "=" and not re.match(r"[a-z]+\.[a-z_]", p.lower())).map(
        lambda p: (f"API_TOKEN={p}", p)),
    _body(PASSWORD_CHARS.replace(":", "") + " ", 14).map(str.strip).map(lambda p: (f"passphrase: {p}\n", p)),
    _body(ALNUM + "-._~+/", 30).map(lambda b: (f"Authorization: Bearer {b}", b)),
    st.text(string.digits, min_size=14, max_size=14).map(lambda d: _luhn_complete("4" + d)).map(
        lambda c: (f"{c[:4]} {c[4:8]} {c[8:12]} {c[12:]}", f"{c[4:8]} {c[8:12]} {c[12:]}")),
    st.text(string.digits, min_size=14, max_size=14).map(lambda d: _luhn_complete("5" + d)).map(lambda c: (c, c)),
    _body(ALNUM + "+/", 40).map(lambda b: (f"-----BEGIN RSA PRIVATE KEY-----\n{b}\n-----END RSA PRIVATE KEY-----", b)),
)


@settings(max_examples=500, deadline=None)
@given(texts, st.sampled_from((" ", "\n", "\t", " \n")), SECRETS, texts)
def test_a_secret_anywhere_in_random_text_is_removed(before, separator, secret, after):
    shown, core = secret
    assume(core not in before and core not in after)
    text = before + separator + shown + separator + after
    out = REDACTOR.redact(text)
    assert core not in out, (text, out)
    assert out == UNGATED.redact(text)
    assert REDACTOR.has_secret(text)
