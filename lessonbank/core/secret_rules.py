"""What a secret looks like: the redaction rules (``DEFAULT_RULES``) and, for text an LLM wrote, the looser
detection patterns (``DETECT_PATTERNS``) that ``redact.Redactor`` applies.

What is found: provider key formats, PEM and PuTTY private keys, JWTs, passwords in URLs, webhook URLs,
``Authorization``/``Bearer`` values, ``name=value`` / ``name: value`` / ``"name": "value"`` assignments
whose name ends in a secret word (password, passphrase, pwd, secret, token, api/access/private/... key,
credentials, sig), ``--password value`` flags, and card numbers that pass the Luhn check. The formats
follow the plugin patterns of Yelp's detect-secrets (``detect_secrets/plugins/*.py``, Apache-2.0), widened
where a vendor's format has grown (``sk-proj-``, ``github_pat_``, ``xapp-``, ``glpat-``...).

Deliberate trade-offs: no entropy heuristics, so hex digests, uuids and base64 data stay unless a secret
name, a provider prefix or (for 40-character AWS secret keys) an AWS word nearby marks them; whatever
follows a secret name is redacted even when it is not secret (``next_page_token``, ``token: the unit``);
a 13-19 digit number starting with 2-6 that passes Luhn is redacted even when it is not a card (one in
ten such numbers); type annotations, placeholders and references (``password: str``, ``"<your key>"``,
``${TOKEN}``, ``self.token``) stay; a URL password that starts like a port (``:8080/``) or holds ``://``
is read as a path, an unquoted value starting with ``=`` as a comparison.

Every rule runs in time linear in the text (the recorder redacts up to 64 KB per field inside the agent's
step callback, and Python's ``re`` backtracks). Where it can, a pattern starts with a literal (``sk-``,
``://``, ``token``), so ``re`` finds its starts with a fast scan, and a look-behind right after that start
refuses starts inside a run of token characters, so a long run starts one attempt, not one per character.
A scan that can fail is bounded (``{3,128}``) or stops where the next start begins (a URL password never
spans ``://``); an unbounded scan is possessive and can only succeed, so the text it covered is not scanned
again. tests/core/test_redact.py times every rule on 64 KB inputs built against it.

Every rule names its triggers, lower-case literals one of which each of its matches contains (``sk-``,
``://``, ``pass``); a rule runs only on text that holds one. A step's fields hold few of them: a 120-character
line of code costs ~15 us instead of ~35 (most of it was calling 50 patterns that could not match). The
tests check that skipping changes nothing: on the secret tables, in every letter case, and on random text.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

# A matched value at most this long is searched again for a secret that starts inside it.
RESCAN_CHARS = 256

# ``keep(text, match)``: True when a match of the pattern is not a secret after all.
Keep = Callable[[str, re.Match[str]], bool]


@dataclass(frozen=True)
class Rule:
    """One redaction rule: a name (for tests and logs) and a compiled pattern whose group ``group`` is the secret.

    ``folded``: the pattern is written in lower case and runs on the lower-cased text. ``back``: characters
    just before the match (checked by the pattern's look-behind) that belong to the secret. ``triggers``:
    lower-case substrings one of which every match contains; the pattern runs only when the text has one.
    """

    name: str
    pattern: re.Pattern[str]
    group: int | str = 0
    folded: bool = False
    back: int = 0
    triggers: tuple[str, ...] = ()
    keep: Keep | None = None

    def spans(self, text: str, folded: str) -> list[tuple[int, int]]:
        """The ``(start, end)`` of every secret this rule finds in ``text`` (``folded`` is its lower case)."""
        if self.triggers and not any(trigger in folded for trigger in self.triggers):
            return []  # ``Redactor.spans`` does not call a rule whose triggers are absent; a direct call checks here
        keep = self.keep
        subject = folded if self.folded else text
        found: list[tuple[int, int]] = []
        pos = 0
        while pos <= len(subject) and (match := self.pattern.search(subject, pos)) is not None:
            if keep is None or not keep(text, match):
                found.append(match.span(self.group))
            # A secret's name can open the value this match took (``password: password="s3cr3t"``): the next
            # search starts at a short value (a long one is not scanned again, so the scan stays linear).
            start, end = match.span(self.group)
            pos = start if match.start() < start and end - start <= RESCAN_CHARS else max(match.end(), pos + 1)
        return [(start - self.back, end) for start, end in found if end > start >= 0]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(text: str) -> str:
    """``text`` in lower case, one character for one character (so positions carry over to ``text``)."""
    lower = text.lower()
    return lower if len(lower) == len(text) else text.translate(_ASCII_LOWER)


# ---------------------------------------------------------------------------------------------- tokens
_TOKEN_CHARS = "A-Za-z0-9_-"


def _prefixed(name: str, lead: str, rest: str, guard: str = _TOKEN_CHARS, triggers: tuple[str, ...] = ()) -> Rule:
    """A token that starts with the literal ``lead``, not inside a longer run of ``guard`` characters; it runs
    only on text holding one of ``triggers`` (default: ``lead``)."""
    start = re.escape(lead)
    return Rule(name, re.compile(f"{start}(?<![{guard}]{start}){rest}"), triggers=triggers or (lead.lower(),))


_LUHN_DOUBLE = bytes.maketrans(b"0123456789", b"0246813579")  # 2d, less 9 past 9, as a digit


def _luhn_fails(text: str, match: re.Match[str]) -> bool:
    digits = text[match.start():match.end("rest")].encode().translate(None, b" -")[::-1]
    return (sum(digits[::2]) + sum(digits[1::2].translate(_LUHN_DOUBLE)) - 48 * len(digits)) % 10 != 0


_AWS_WINDOW = 200


def _not_aws_secret(text: str, match: re.Match[str]) -> bool:
    """A 40-character base64 run is an AWS secret key only if it is random-looking and AWS is named nearby."""
    value = match.group(0)
    if value.isupper() or value.islower() or not any(c in string.digits for c in value):
        return True
    start, end = match.span()
    around = (text[max(start - _AWS_WINDOW, 0):start] + " " + text[end:end + _AWS_WINDOW]).lower()
    return not any(word in around for word in ("aws", "akia", "asia"))


_WORDLIKE = re.compile(r"[A-Za-z][a-z]*(?:[-.][a-z]+)*\.?|[A-Z]+|[0-9]+")


def _word_after_scheme(text: str, match: re.Match[str]) -> bool:
    """``Bearer internationalization`` in prose: a plain word is not a credential."""
    return _WORDLIKE.fullmatch(text, *match.span("value")) is not None


# Only the first digit is consumed, so a candidate that fails Luhn does not hide a card that starts inside it.
_CARD = (
    r"[2-6](?<![A-Za-z0-9_.+-][2-6])(?=(?P<rest>[0-9]{3}"
    r"(?:[0-9]{9,15}|(?P<sep>[ -])[0-9]{4}(?P=sep)[0-9]{4}(?P=sep)[0-9]{1,4}"
    r"|(?P<sep2>[ -])[0-9]{6}(?P=sep2)[0-9]{4,5})"
    r"(?![A-Za-z0-9_-]|\.[0-9])))"
)

_TOKEN_RULES: tuple[Rule, ...] = (
    Rule(
        "pem_private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]{1,16}+ ){0,4}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^-]++|-(?!----END ))*+(?:-----END (?:[A-Z0-9]{1,16}+ ){0,4}PRIVATE KEY(?: BLOCK)?-----)?"
        ),
        triggers=("-----begin ",),
    ),
    Rule("putty_private_key", re.compile(r"PuTTY-User-Key-File-[0-9]:(?:[^P]++|P(?!rivate-MAC:))*+"
                                         r"(?:Private-MAC: [0-9a-f]{1,128}+)?"), triggers=("putty-user-key-file-",)),
    _prefixed("openai_key", "sk-", r"[A-Za-z0-9_-]{20,}+"),  # OpenAI, Anthropic (sk-ant-), OpenRouter (sk-or-)
    Rule("stripe_key", re.compile(r"k_(?<=(?<![A-Za-z0-9_])[rsp]k_)(?:live|test)_[A-Za-z0-9]{16,}+"), back=1,
         triggers=("k_live_", "k_test_")),
    _prefixed("stripe_webhook_secret", "whsec_", r"[A-Za-z0-9]{24,}+"),
    _prefixed("aws_access_key_id", "A", r"(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Z0-9])", "A-Z0-9",
              ("a3t", "akia", "asia", "abia", "acca")),
    Rule("aws_secret_access_key", re.compile(r"[A-Za-z0-9/+](?<![A-Za-z0-9/+]{2})[A-Za-z0-9/+]{39}(?![A-Za-z0-9/+=])"),
         triggers=("aws", "akia", "asia"), keep=_not_aws_secret),
    _prefixed("github_token", "g", r"(?:h[pousr]_[A-Za-z0-9]{36,}+|ithub_pat_[A-Za-z0-9_]{22,}+)",
              triggers=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _prefixed("gitlab_token", "gl", r"(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_-]{20,}+"
                                    r"(?:\.[A-Za-z0-9_-]{2,}+)*+", triggers=tuple(
        f"gl{kind}-" for kind in ("pat", "dt", "ft", "soat", "rt", "cbt", "imt", "ptt", "agent", "oas"))),
    _prefixed("slack_token", "x", r"(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}+", triggers=("xox", "xapp-")),
    _prefixed("huggingface_token", "hf_", r"[A-Za-z0-9]{30,}+"),
    _prefixed("google_api_key", "AIza", r"[A-Za-z0-9_-]{35,}+"),
    _prefixed("google_oauth_secret", "GOCSPX-", r"[A-Za-z0-9_-]{24,}+"),
    _prefixed("google_oauth_token", "ya29.", r"[A-Za-z0-9_-]{20,}+"),
    _prefixed("npm_token", "npm_", r"[A-Za-z0-9]{36,}+"),
    _prefixed("pypi_token", "pypi-AgE", r"[A-Za-z0-9_-]{50,}+"),
    _prefixed("sendgrid_key", "SG.", r"[A-Za-z0-9_-]{16,32}+\.[A-Za-z0-9_-]{30,}+", "A-Za-z0-9_.-"),
    _prefixed("mailgun_key", "key-", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    Rule("mailchimp_key", re.compile(r"-us(?<=(?<![0-9a-f])[0-9a-f]{32}-us)[0-9]{1,2}(?![0-9])"), back=32,
         triggers=("-us",)),
    _prefixed("twilio_api_key", "SK", r"[0-9a-f]{32}(?![A-Za-z0-9])", "A-Za-z0-9"),
    _prefixed("twilio_account_sid", "AC", r"[0-9a-f]{32}(?![A-Za-z0-9])", "A-Za-z0-9"),
    Rule("azure_client_secret", re.compile(r"Q~(?<=(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}[0-9]Q~)"
                                           r"[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"), back=4,
         triggers=("q~",)),
    _prefixed("groq_key", "gsk_", r"[A-Za-z0-9]{32,}+"),
    _prefixed("replicate_token", "r8_", r"[A-Za-z0-9]{30,}+"),
    _prefixed("perplexity_key", "pplx-", r"[A-Za-z0-9]{32,}+"),
    _prefixed("xai_key", "xai-", r"[A-Za-z0-9]{40,}+"),
    _prefixed("tavily_key", "tvly-", r"[A-Za-z0-9-]{20,}+"),
    _prefixed("nvidia_key", "nvapi-", r"[A-Za-z0-9_-]{40,}+"),
    _prefixed("langsmith_key", "lsv2_", r"(?:pt|sk)_[A-Za-z0-9_]{32,}+"),
    _prefixed("databricks_token", "dapi", r"[0-9a-f]{32}(?![A-Za-z0-9])"),
    _prefixed("vault_token", "hv", r"[sbr]\.[A-Za-z0-9_-]{24,}+", triggers=("hvs.", "hvb.", "hvr.")),
    _prefixed("shopify_token", "shp", r"(?:at|ss|ca|pa)_[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
    _prefixed("digitalocean_token", "do", r"[opr]_v1_[0-9a-f]{64}(?![A-Za-z0-9])", triggers=("_v1_",)),
    _prefixed("square_token", "sq0", r"(?:atp|csp)-[A-Za-z0-9_-]{22,}+"),
    _prefixed("postman_key", "PMAK-", r"[A-Za-z0-9-]{30,}+"),
    _prefixed("atlassian_token", "ATATT", r"[A-Za-z0-9_=-]{50,}+"),
    _prefixed("jwt", "eyJ", r"[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"),
    # user id . timestamp . HMAC: the match starts at the first dot (a fast literal start); the id stays
    Rule("discord_bot_token", re.compile(
        r"\.[A-Za-z0-9_-]{6}\.(?:" + "|".join(
            rf"(?<=(?<![A-Za-z0-9_-])[MNO][A-Za-z0-9_-]{{{n}}}\.[A-Za-z0-9_-]{{6}}\.)" for n in range(23, 28))
        + r")[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_-])"), triggers=(".",)),
    Rule("telegram_bot_token", re.compile(
        r":(?<=[0-9]{8}:)(?:(?<=(?<![0-9])[0-9]{8}:)|(?<=(?<![0-9])[0-9]{9}:)|(?<=(?<![0-9])[0-9]{10}:))"
        r"(?P<value>[A-Za-z0-9_-]{35})(?![A-Za-z0-9_-])"), group="value", triggers=(":",)),
    Rule("slack_webhook", re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<value>[a-z0-9_/-]{8,}+)"),
         group="value", folded=True, triggers=("hooks.slack.com/",)),
    Rule("discord_webhook", re.compile(r"discord(?:app)?\.com/api/webhooks/(?P<value>[0-9]{5,}+/[a-z0-9_-]{20,}+)"),
         group="value", folded=True, triggers=("/api/webhooks/",)),
    Rule("card_number", re.compile(_CARD), group="rest", back=1, keep=_luhn_fails, triggers=tuple("23456")),
)

# ------------------------------------------------------------------------------------ context: url, header
_URL_PASSWORD = (
    r"://(?<=[A-Za-z0-9]://)[^\s:/?#@'\"<>]{0,128}+:"
    r"(?![0-9]{1,5}+(?:[/?#\s'\"<>]|\Z))"  # host:port/path, not user:password
    r"(?P<value>(?:[^\s'\"<>@:]++|:(?!//))*+(?:@(?:[^\s'\"<>@:]++|:(?!//))*+){0,3})"  # may hold '/' and '@'
    r"(?=@[^\s'\"<>@/?#:]{1,253}+(?:[/?#:\s'\"<>]|\Z))"
)

_CONTEXT_RULES: tuple[Rule, ...] = (
    Rule("url_password", re.compile(_URL_PASSWORD), group="value", triggers=("://",)),
    Rule("bearer_token", re.compile(r"bearer(?<![a-z0-9_]bearer)[ \t]++(?P<value>[a-z0-9._~+/-]{8,}+=*+)"),
         group="value", folded=True, keep=_word_after_scheme, triggers=("bearer",)),
    Rule("authorization_header", re.compile(
        r"authorization(?:\\?[\"'])?\]?[ \t]*+[:=][ \t]*+(?:\\?[\"'])?"
        r"(?:(?:bearer|basic|token|digest|negotiate|ntlm|apikey|api-key|key|sso-key|jwt|otp)[ \t]++)?"
        r"(?P<value>[^\s\"'`,;\\\[\]<>{}]{6,}+)"), group="value", folded=True, keep=_word_after_scheme,
        triggers=("authorization",)),
)

# ------------------------------------------------------------------------------------------- assignments
# After a secret name: an optional closing quote/bracket, then '=', ':', ':=' or '=>' (not '==', '::').
_GAP = r"(?:\\?[\"'`])?\]?[ \t]*+(?::=|=>|=(?!=|>|~[ \t])|:(?!:))[ \t]*+(?:[bfru]{0,2}(?:\\\"|[\"'`]))?"
# Values that are not secrets: type annotations, template placeholders, masks. Checked where the value starts,
# and only when the value ends right after it.
_PLACEHOLDER = (
    r"(?:s(?:tr(?:ing)?|ecretstr)|int|b(?:ool|ytes)|f(?:loat|alse)|n(?:one|ull|il)|true|undefined|any|optional"
    r"|required"
    r"|\$\{[^{}\n]{1,64}+\}|\{\{?[^{}\n]{0,64}+\}\}?|<[^<>\n]{0,64}+>|%\(?[a-z_]{0,64}+\)?s"
    r"|\*{1,64}+|x{1,64}+|\.\.\.|\[redacted\]|your[_ -][a-z_ -]{0,64}+)"
)
# Unquoted, an attribute of a well-known object is a reference to a secret held elsewhere.
_REFERENCE = (
    r"(?:self|cls|this|args|kwargs|opts|options|config|settings|env|params|request|req|ctx|context|os\.environ)"
    r"(?:\.[a-z_][a-z0-9_]{0,64}+)++"
)
_NOT_PLACEHOLDER_WORD = rf"(?!(?:{_PLACEHOLDER}|{_REFERENCE})(?:[\s,;)\]}}|]|\Z))"
# The value: the inside of a quoted string, its closing quote kept (a string with no closing quote within 256
# characters counts only when it is longer, or when the text ends); after ': ', the words to the end of the
# line (YAML; a line that holds another ': ' is not one value); else an unquoted run that is not a call.


def _quoted(opening: str, char: str, closing: str) -> str:
    cut_short = rf"(?![\s),;\]}}+.]){char}{{1,256}}+\Z"  # not the code after a closed string: ("Password: ")
    body = rf"(?:{char}{{1,256}}+(?={closing})|{cut_short}|{char}{{257,}}+)"
    return rf"(?<={opening})(?!{_PLACEHOLDER}{closing}){body}"


_BARE = r"[^\s\"'`,;&()\[\]{}<>\\]"
_PLAIN = r"[^\r\n\f\v\"'`,;&()\[\]{}<>\\:]"  # a YAML plain scalar: words, no ': '
_VALUE = "(?P<value>" + "|".join((
    _quoted(r"\\\"", r"(?:[^\"\\\n]|\\[^\"\n])", r"\\\""),  # JSON inside a string: \"...\"
    _quoted('"', r"(?:[^\"\\\n]|\\.)", '"'),
    _quoted("'", r"(?:[^'\\\n]|\\.)", "'"),
    _quoted("`", r"[^`\n]", "`"),
    rf"(?<=: )(?!{_PLACEHOLDER}[ \t]*+(?:[=|]|\r?\n|\Z)){_BARE}(?:{_PLAIN}++|:(?! )){{1,256}}+(?=\r?\n|\Z)",
    rf"(?<![\"'`]){_NOT_PLACEHOLDER_WORD}(?:{_BARE}{{129,}}+|{_BARE}{{3,128}}+(?![(\[]))",
)) + ")"
_KEY_QUALIFIERS = (
    "api", "access", "secret", "private", "auth", "account", "client", "master", "encryption", "signing", "app",
    "license", "subscription", "service", "db", "database",
)


def _assignment(name: str, trigger: str, secret_name: str) -> Rule:
    """``secret_name`` (which starts with the literal ``trigger``), a gap, then a value."""
    return Rule(name, re.compile(secret_name + _GAP + _VALUE), group="value", folded=True, triggers=(trigger,))


_ASSIGNMENT_RULES: tuple[Rule, ...] = (
    _assignment("password_assignment", "pass", r"pass(?:w(?:or)?d|phrase|code|(?<![a-z]pass))"),
    _assignment("pwd_assignment", "pw", r"pw(?:d(?![ \t]*+[=:][ \t]*+[\"']?[/~])|(?<![a-z]pw))"),  # not PWD=/home/x
    _assignment("secret_assignment", "secret", r"secret"),
    _assignment("token_assignment", "token", r"token"),
    _assignment("key_assignment", "key",
                "key(?:" + "|".join(f"(?<={q}[_-]key)|(?<={q}key)" for q in _KEY_QUALIFIERS) + ")"),
    _assignment("credential_assignment", "credential", r"credentials?"),
    _assignment("signature_assignment", "sig", r"sig(?<![a-z]sig)"),  # Azure SAS ``&sig=``
    Rule("secret_flag", re.compile(
        r"--(?<![a-z0-9_-]--)[a-z0-9-]{0,32}(?:password|passwd|passphrase|token|secret|api-key|apikey)"
        rf"[ \t]++[\"']?{_NOT_PLACEHOLDER_WORD}(?P<value>[^\s\"'`;&|<>()]{{3,}}+)"), group="value", folded=True,
        triggers=("--",)),
)

DEFAULT_RULES: tuple[Rule, ...] = _TOKEN_RULES + _CONTEXT_RULES + _ASSIGNMENT_RULES

# Second line for text an LLM wrote (lessons): looser than the redaction rules, detection only.
DETECT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{12,}+",  # OpenAI / Anthropic keys, shortened
    r"hf_(?<![A-Za-z0-9_-]hf_)[A-Za-z0-9]{16,}+",
    r"gh[pousr]_(?<![A-Za-z0-9_-]gh._)[A-Za-z0-9]{20,}+",
    r"github_pat_[A-Za-z0-9_]{16,}+",
    r"glpat-[A-Za-z0-9_-]{12,}+",
    r"xox[abposre]-[A-Za-z0-9-]{8,}+",
    r"AIza[A-Za-z0-9_-]{20,}+",
    r"(?:AKIA|ASIA)[A-Z0-9]{12,}+",
    r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{10,}+\.",  # the head of a JWT
    r"-----BEGIN [A-Z0-9 ]{0,40}?PRIVATE KEY",
    r"://[^\s:/?#@]{0,64}+:[^\s/@]{1,128}+@",  # credentials in URLs
    r"(?i)bearer[ \t]++[A-Za-z0-9_.=-]{16,}+",
    r"(?i)pass(?:word|phrase|wd)[ \t]++(?:is|was)[ \t]++[\"'`]?(?=[^\s\"'`]{0,63}?[0-9])[^\s\"'`]{6,}+",
    r"\[REDACTED",  # a redaction mark: the text was written around a secret
))
