"""Table-driven redaction: what must go, ordinary text that must stay exactly as it is, and every rule timed
on 64 KB inputs built to make a backtracking regex go quadratic."""

from __future__ import annotations

import base64
import dataclasses
import random
import re
import time
from collections.abc import Callable

import pytest

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.redact import DEFAULT_RULES, REDACTED, WITHHELD, Redactor, Rule, fold

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq1w2\nabcdEFGH1234\n-----END RSA PRIVATE KEY-----"
OPENSSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAA\n"
           "AAtzc2gtZWQyNTUxOQAAACDx\n-----END OPENSSH PRIVATE KEY-----\n")
AZURE_KEY = "LoctScwVyQuZm3crT8em/UyRShbbRwh1Kw8VRLg1wOcZCX36hwHpIy8h8oEmh3hpduv8wyf1kxdlJ0upgptEBg=="
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
AWS_SECRET = "uoRgnatmUdjAWtGSU8po/799NksnRH9ucAUsdMlH"

# (case, text, secret that must disappear, surrounding text that must remain)
SECRETS = [
    ("openai key in env", "OPENAI_API_KEY=sk-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzdocJ2isAj",
     "u8jzPde0IgxLd6GncfBA", "OPENAI_API_KEY="),
    ("openai project key in code", 'client = OpenAI(api_key="sk-proj-IhKtJ0RlgLKOmxgJTeKd_NnFRIBXuDL7DxtpYlSX")',
     "IhKtJ0RlgLKOmxgJTeKd", "client = OpenAI(api_key="),
    ("anthropic key in prose", "Calling with sk-ant-api03-Rt_1fjORS-6ilI8ihN5KXSc7Tvo-hBKqFYY-kv5ZAA now.",
     "Rt_1fjORS-6ilI8ihN5K", " now."),
    ("hugging face token in a log", "401 Client Error for 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 (expired)",
     "JriBJrTAwRyojfljoQoa", "(expired)"),
    ("aws access key id", "Found AKIA6D39ZZZZG4ZDMEN2 in the build logs", "AKIA6D39ZZZZG4ZDMEN2", "in the build logs"),
    ("aws credentials file", f"[default]\naws_access_key_id = AKIA6D39ZZZZG4ZDMEN2\naws_secret_access_key = "
     f"{AWS_SECRET}\nregion = eu-west-1", AWS_SECRET[:20], "region = eu-west-1"),
    ("aws secret key next to its key id", f"Access key ID,Secret access key\nAKIA6D39ZZZZG4ZDMEN2,{AWS_SECRET}\n",
     AWS_SECRET[:20], "Secret access key"),
    ("aws secret key passed positionally", f'boto3.client("s3", "eu-west-1", None, None, "AKIA6D39ZZZZG4ZDMEN2", '
     f'"{AWS_SECRET}")', AWS_SECRET[:20], "boto3.client("),
    ("aws sts json", '{"Credentials": {"AccessKeyId": "ASIA6D39ZZZZG4ZDMEN2", "SecretAccessKey": '
     f'"{AWS_SECRET}", "SessionToken": "FwoGZXIvYXdzEBYaDH2k"}}', AWS_SECRET[:20], '"SessionToken": "'),
    ("github classic token in a remote", "git remote set-url origin https://ghp_Hx6kwXoIIXGvOoNZYW2mZp0zVZomHFwUbbYr"
     "@github.com/acme/app.git", "Hx6kwXoIIXGvOoNZYW2m", "@github.com/acme/app.git"),
    ("github fine-grained token", "gh auth login --with-token <<< github_pat_114QMW2WXFOGO4MVN4A4WF_1Qh6yYTWmE4lBYOv"
     "fZ8UzDzV8fUkkibjL5DZPjN0MEQ7wjJJibaZUPgHV7i", "114QMW2WXFOGO4MVN4A4WF", "gh auth login"),
    ("gitlab token header", 'curl --header "PRIVATE-TOKEN: glpat-3yBdGBLEPH1qhT61qtc4" https://gitlab.example.com/api',
     "3yBdGBLEPH1qhT61qtc4", "https://gitlab.example.com/api"),
    ("slack bot token", 'WebClient(token="xoxb-290222791805-8887180334018-CJbW56eCuNGMGmSrCGIZEG8p")',
     "CJbW56eCuNGMGmSrCGIZEG8p", "WebClient(token="),
    ("slack app-level token", "Socket mode uses xapp-1-A7Q9M2I0HZ2-5136134125242-e73cf575dcad6ba2b0aee0ca9237328815"
     "84d8c4fa2815d2802827283e0ad841 here", "e73cf575dcad6ba2b0ae", " here"),
    ("slack webhook", 'requests.post("https://hooks.slack.com/services/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",'
     " json=msg)", "ZbqcabUGJmGEp7CgQ0PBQFI1", "https://hooks.slack.com/services/"),
    ("stripe restricted key", "Stripe rejected rk_live_4zGtSnovm14TUOizwd1iaeOV (restricted)",
     "4zGtSnovm14TUOizwd1iaeOV", "(restricted)"),
    ("google api key in a url", "GET https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key=AIzaG3uhkWKF"
     "Lf6xuI5aHUQPFeNBTxaQWk8JzFa", "G3uhkWKFLf6xuI5aHUQPF", "address=Paris"),
    ("google oauth client secret", "the OAuth client secret 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 was rotated",
     "9Pu2njHkAm1-5wDr16Ep", "was rotated"),
    ("jwt in a cookie", f"Set-Cookie: session={JWT}; Path=/; HttpOnly", "SflKxwRJSMeKKF2QT4fw", "; Path=/; HttpOnly"),
    ("pem private key", f"key:\n{PEM}\nafter", "MIIEowIBAAKCAQEAq1w2", "after"),
    ("pem key cut short", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B", "MIIEvQIBADANBgkq", ""),
    ("openssh private key", f"$ cat ~/.ssh/id_ed25519\n{OPENSSH}$ ls", "b3BlbnNzaC1rZXktdjEAAAAA", "$ ls"),
    ("gcp service account json", '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv'
     'QIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n", "client_email": "x@p.iam.gserviceaccount.com"}',
     "MIIEvQIBADANBgkqhkiG9w0B", '"client_email": "x@p.iam.gserviceaccount.com"'),
    ("azure storage connection string", f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};"
     "EndpointSuffix=core.windows.net", AZURE_KEY[:24], "EndpointSuffix=core.windows.net"),
    ("azure sas signature", "https://acme.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig=Zm9vYmFyYmF6%2Fqux%3D",
     "Zm9vYmFyYmF6", "sv=2022-11-02&sp=r&sig="),
    ("azure ad client secret", "The app registration secret qVT8Q~OJMaidDn87XG3~q~xbMtEPO6Uk-zYuF0ie expires soon",
     "OJMaidDn87XG3~q~xbMt", "expires soon"),
    ("sendgrid key", "sg = SendGridAPIClient('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')",
     "IXAAjlsHUqJoUD-_Ydua", "sg = SendGridAPIClient("),
    ("npm token in npmrc", "//registry.npmjs.org/:_authToken=npm_y3Lex7BWr2drgd1QsO7jprBGumXxY9B4bZWO",
     "y3Lex7BWr2drgd1QsO7j", "//registry.npmjs.org/"),
    ("pypi token in pypirc", "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmc4FxFEtKyPiYGFDm7ena8D5Vf"
     "LDpgyyjVw5HanSBeVRsfAGeAbP0VxNjAe-9i0mYtluYI0K", "4FxFEtKyPiYGFDm7ena8", "username = __token__"),
    ("twilio api key", "Client('SKc621de49f145fda9988c79fc35526f7e', api_secret, account_sid)",
     "c621de49f145fda9988c79fc", "api_secret, account_sid)"),
    ("twilio auth token", "TWILIO_AUTH_TOKEN=aed46725a2a7b860dcd6c8a1f8b46287", "aed46725a2a7b860dcd6",
     "TWILIO_AUTH_TOKEN="),
    ("mailgun key", 'requests.post(url, auth=("api", "key-cced9041dff02cee737443e210471948"))',
     "cced9041dff02cee7374", "requests.post(url, auth="),
    ("mailchimp key", "mailchimp.set_config({'api_key': x}) with 9d19bdd0b6cc60d5d32cbe54014c2b54-us14 works",
     "9d19bdd0b6cc60d5d32c", " works"),
    ("discord bot token", "client.run('MHOBSWhgetH8LmyqoYMaaItDr9.OF8EFd.0Nhcy-1kGD2VD-eR1UYzaLiA-zN')",
     "0Nhcy-1kGD2VD-eR1UYz", "client.run("),
    ("discord webhook", "POST https://discord.com/api/webhooks/542821167342075096/luCZz8xBfZuXTptFyfePpX6N1NF2XV54wca_"
     "7E56w8ZniqT3Ul4ffqkOkgWrdioyq_Kv -> 204", "luCZz8xBfZuXTptFyfeP", "-> 204"),
    ("telegram bot token", "GET https://api.telegram.org/bot337344197:AAxC_1hsYgBds1ghxY5OokvQyx7eNWVQ4vn/getMe",
     "AAxC_1hsYgBds1ghxY5O", "/getMe"),
    ("basic auth header", "Authorization: Basic ZGVwbG95OlRyMWNreS1QYTU1\nAccept: */*", "ZGVwbG95OlRyMWNreS1QYTU1",
     "Accept: */*"),
    ("bearer header in curl", 'curl -H "Authorization: Bearer akJkS1pAWTN3lg8zV5yPU8d0FZfWe7ihGyiRUIQf" '
     "https://api.example.com/v1/me", "akJkS1pAWTN3lg8zV5yP", "https://api.example.com/v1/me"),
    ("bearer in a headers dict", 'headers = {"Authorization": "Bearer akJkS1pAWTN3lg8zV5yPU8d0FZfWe7ihGyiRUIQf"}',
     "akJkS1pAWTN3lg8zV5yP", 'headers = {"Authorization": "Bearer '),
    ("password in a database url", "postgresql://app:s3cr3tPass@db.internal:5432/app", "s3cr3tPass",
     "postgresql://app:[REDACTED]@db.internal:5432/app"),
    ("url password with a slash", "DATABASE_URL=postgres://admin:pa/ss+wd9@db:5432/prod", "pa/ss+wd9",
     "@db:5432/prod"),
    ("url password with an at sign", "mysql://root:p@ssw0rd@localhost:3306/shop", "ssw0rd",
     "mysql://root:[REDACTED]@localhost:3306/shop"),
    ("redis url without user", "redis://:hunter2@cache:6379/0", "hunter2", "redis://:[REDACTED]@cache:6379/0"),
    ("password keyword argument", 'psycopg.connect(host="db", user="app", password="correct horse battery")',
     "correct horse", 'psycopg.connect(host="db", user="app", password="'),
    ("password in json", '{"username": "admin", "password": "Tr0ub4dor&3", "remember": true}', "Tr0ub4dor",
     '"remember": true'),
    ("password in yaml", "database:\n  user: app\n  password: hunter2-prod\n  port: 5432", "hunter2-prod",
     "  port: 5432"),
    ("client secret in yaml", "oauth:\n  client_secret: 8f7e6d5c4b3a29180716\n", "8f7e6d5c4b3a29180716", "oauth:"),
    ("passphrase in yaml", "ssh:\n  passphrase: correct horse battery staple\n  port: 22", "battery staple",
     "  port: 22"),
    ("passphrase in json", '{"key_passphrase": "N0t-so-s3cret", "path": "id_rsa"}', "N0t-so-s3cret", '"path"'),
    ("exported token", "export GITHUB_TOKEN=abc123def456ghi789\nexport X=1", "abc123def456ghi789", "export X=1"),
    ("dotenv password", "DB_HOST=db\nDB_PASS=Sup3rS3cret!\nDB_PORT=5432", "Sup3rS3cret", "DB_PORT=5432"),
    ("django secret key", "SECRET_KEY = 'django-insecure-^a8&k2=q9x(4m'", "^a8&k2=q9x", "SECRET_KEY = '"),
    ("connection string pwd", "Server=db;Database=x;Pwd=Tr0ub4dor;", "Tr0ub4dor", "Server=db;Database=x;Pwd="),
    ("password flag", "mysql --user root --password hunter2-prod --host db", "hunter2-prod", "--host db"),
    ("api key header", "X-Api-Key: 5f2b9c1e8d7a6b5c4d3e2f1a", "5f2b9c1e8d7a6b5c4d3e2f1a", "X-Api-Key: "),
    ("card number with spaces", "Paid with 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111", "exp 12/29"),
    ("card number then cvc", "card 4539 5787 6362 1486 123 on file", "4539 5787 6362 1486", " 123 on file"),
    ("card number unspaced", "card=5500005555555559&cvc=123", "5500005555555559", "&cvc=123"),
    ("amex card number", "Amex 3782 822463 10005 declined", "822463", "declined"),
    ("card number with dashes", "6011-0009-9013-9424 was charged", "6011-0009-9013-9424", "was charged"),
    ("groq key", "GROQ_API_KEY is 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", "RYU7oe1wNWqku5Nr50Dj",
     "GROQ_API_KEY is "),
    ("tavily key", "TavilyClient(api_key=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)", "dO2x93CJHLS45gqIO2zV",
     "TavilyClient(api_key="),
    ("vault token", "VAULT_TOKEN from login: hvs.olNV9ds0HqtO93L7Q5uUaVco!", "olNV9ds0HqtO93L7Q5uU", "!"),
    ("putty private key", "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\nAAAAgQDx9Jk\n"
     "Private-MAC: 6a1f2e", "AAAAgQDx9Jk", ""),
]

# A secret for each rule the table above does not reach, so that every rule finds one (made-up values).
MORE_SECRETS = {
    "stripe_webhook_secret": "STRIPE_WEBHOOK=whsec_4eC39HqLyjWDarjtT1zdp7dc",
    "google_oauth_token": "access token ya29.a0AfH6SMBx3kQ9vLrT2nWq8Zp from the flow",
    "twilio_account_sid": "Client(AC0123456789abcdef0123456789abcdef, token)",
    "replicate_token": "REPLICATE=r8_Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaE",
    "perplexity_key": "pplx-Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaEu",
    "xai_key": "key xai-Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaEuTq2Lm9Pz4K in use",
    "nvidia_key": "NVIDIA nvapi-Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaEuTq2Lm9Pz4K",
    "langsmith_key": "LANGSMITH lsv2_pt_Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaEu",
    "databricks_token": "host=x dapi0123456789abcdef0123456789abcdef done",
    "shopify_token": "shop shpat_0123456789abcdef0123456789abcdef done",
    "digitalocean_token": "DO dop_v1_" + "0123456789abcdef" * 4 + " done",
    "square_token": "square sq0atp-Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf done",
    "postman_key": "postman PMAK-Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0 done",
    "atlassian_token": "jira ATATT3xFfGF0Xq2Lm9Pz4Kt7Vb1Nc6Hd3Jf8Gs5Wr0YaEuTq2Lm9Pz4Kt7Vb1N done",
    "credential_assignment": 'credentials = "c0rrect-h0rse-battery"',
}

UUID = "5b0f3c1e-8f7d-4b8e-9a57-2f1c3e4d5a6b"
IMAGE = base64.b64encode(random.Random(3).randbytes(3000)).decode()

MUST_KEEP = [
    ("plain prose", "The token count was 512 and the password policy is strict."),
    ("max_tokens argument", "model.generate(max_tokens=512, temperature=0.2)"),
    ("token from a function call", "token = tokenizer.encode(text)"),
    ("url with port and no credentials", "https://example.com:8080/path?q=1"),
    ("url with user only", "ssh://git@github.com/org/repo.git"),
    ("url with a port and an at sign in the path", "http://localhost:4873/@types/node and npm i @scope/pkg"),
    ("url without credentials", "https://api.example.com/v1/users?page=2&sort=asc#top"),
    ("short sk- word", "scikit-learn is imported as sk-learn sometimes"),
    ("task- prefix", "task-abcdefghijklmnopqrstuvwxyz0123456789"),
    ("uuid", f"run {UUID} finished"),
    ("uuid-like ids", f"request_id={UUID} trace 01HZX3K5V8Q9ABCDEFGHJKMNPQ"),
    ("hex digest", "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("git sha in prose", "Reverted 5d8e4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d after the aws-cli upgrade."),
    ("code with secret-ish names", "secret_sauce_count = len(items)\nprint(password_policy)"),
    ("token_count", "token_count = 5"),
    ("password_field_label", 'password_field_label = "Password"'),
    ("json looking observation", '{"rows": 3, "columns": ["a", "b"]}'),
    ("pem public key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqh\n-----END PUBLIC KEY-----"),
    ("long number failing luhn", "order 5234567890123456 shipped at 1712345678901"),
    ("spaced number failing luhn", "ref 4111 1111 1111 1112"),
    ("phone and isbn", "call +1 415 555 0100, ISBN 978-0-306-40615-7"),
    ("file paths", "/home/alice/.aws/credentials and C:\\Users\\bob\\secrets\\token.txt and ./api_key.txt"),
    ("base64 image data", f'<img src="data:image/png;base64,{IMAGE}">'),
    ("base64 field in json", f'{{"content_b64": "{IMAGE}", "size": 3000}}'),
    ("type annotations", "def login(user: str, password: str, token: str | None = None) -> bool:"),
    ("placeholders", 'api_key="YOUR_API_KEY"\npassword: "<your password>"\ntoken: ${{ secrets.GITHUB_TOKEN }}'),
    ("references to secrets", 'api_key = os.environ["OPENAI_API_KEY"]\n"dropped_secret": self.dropped_secret,'),
    ("password prompt", 'password = getpass.getpass("Password: ")'),
    ("current directory", "PWD=/home/alice/project\nOLDPWD=/home/alice"),
    ("bearer built in code", 'headers = {"Authorization": f"Bearer {token}"}'),
    ("bearer in prose", "Bearer tokens are short-lived; basic authentication is disabled."),
    ("dict keys", "sorted(rows, key=lambda r: r[1]); primary_key=True; keys = d.keys()"),
    ("already redacted", "token=[REDACTED] and password: [REDACTED]"),
]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(("name", "text", "secret", "kept"), SECRETS, ids=[c[0] for c in SECRETS])
def test_secret_is_redacted_and_detected(redactor, name, text, secret, kept):
    out = redactor.redact(text)
    assert secret not in out
    assert REDACTED in out
    assert kept in out
    assert redactor.has_secret(text)


def test_the_secret_table_is_broad():
    assert len(SECRETS) >= 38


@pytest.mark.parametrize(("name", "text"), [c for c in MUST_KEEP if c[0] != "already redacted"],
                         ids=[c[0] for c in MUST_KEEP if c[0] != "already redacted"])
def test_ordinary_text_is_left_alone(redactor, name, text):
    assert redactor.redact(text) == text
    assert not redactor.has_secret(text)


def test_redacted_text_is_stable_but_still_flagged(redactor):
    text = dict(MUST_KEEP)["already redacted"]
    assert redactor.redact(text) == text
    assert redactor.has_secret(text)


def test_extra_patterns_from_settings():
    redactor = Redactor([r"ACME-\d{6}", r"(?i)internal\.corp\.example"])
    out = redactor.redact("ticket ACME-123456 on INTERNAL.corp.example, not ACME-12")
    assert out == f"ticket {REDACTED} on {REDACTED}, not ACME-12"
    assert [rule.name for rule in redactor.rules[-2:]] == ["extra_0", "extra_1"]


def test_an_extra_pattern_matching_nothing_inserts_nothing():
    assert Redactor(["x*"]).redact("abc") == "abc"


def test_invalid_extra_pattern_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="not a valid regex"):
        Redactor(["(unclosed"])


def test_several_secrets_in_one_text(redactor):
    text = "OPENAI=sk-abcdefghijklmnopqrstuvwx0123 and AKIAIOSFODNN7EXAMPLE and password: hunter22"
    out = redactor.redact(text)
    assert "sk-abcdef" not in out and "AKIAIOSFODNN7" not in out and "hunter22" not in out
    assert out.count(REDACTED) == 3


def test_overlapping_findings_become_one_mark(redactor):
    out = redactor.redact("postgres://u:sk-abcdefghijklmnopqrstuvwx0123@db/x")
    assert out == f"postgres://u:{REDACTED}@db/x"


def test_rule_names_are_unique():
    names = [rule.name for rule in DEFAULT_RULES]
    assert len(names) == len(set(names))


def test_text_whose_lower_case_is_longer_keeps_positions(redactor):
    text = "İstanbul İ password=hunter22 İ"  # 'İ'.lower() is two characters
    assert len(fold(text)) == len(text)
    assert redactor.redact(text) == f"İstanbul İ password={REDACTED} İ"


def _ungated(rule: Rule) -> Rule:
    """``rule`` run on every text. The AWS secret key's triggers are words near the key, not in it: they stay."""
    return rule if rule.name == "aws_secret_access_key" else dataclasses.replace(rule, triggers=())


def _table_texts() -> list[str]:
    texts = [c[1] for c in SECRETS] + list(MORE_SECRETS.values()) + [c[1] for c in MUST_KEEP]
    return texts + [t.upper() for t in texts] + [t.lower() for t in texts] + [t.swapcase() for t in texts]


def test_every_rule_finds_a_secret_of_the_tables():
    texts = [c[1] for c in SECRETS] + list(MORE_SECRETS.values())
    missing = [rule.name for rule in DEFAULT_RULES if not any(rule.spans(t, fold(t)) for t in texts)]
    assert not missing


def test_a_rule_skipped_for_its_triggers_could_not_have_matched():
    """Every rule runs only on text holding one of its triggers (most fields hold none of most rules' triggers):
    a trigger must be something every match contains."""
    assert all(rule.triggers for rule in DEFAULT_RULES)
    wrong = []
    for text in _table_texts():
        folded = fold(text)
        for rule in DEFAULT_RULES:
            if rule.spans(text, folded) != _ungated(rule).spans(text, folded):
                wrong.append((rule.name, text[:60]))
    assert not wrong


def test_the_redactor_skips_a_rule_whose_triggers_are_absent(monkeypatch):
    calls: list[str] = []
    redactor = Redactor()
    redactor.rules = tuple(dataclasses.replace(rule, pattern=_Spy(rule.pattern, rule.name, calls))
                           for rule in redactor.rules)
    assert redactor.redact("x = 3") == "x = 3"
    assert calls == ["card_number"]  # '3' could open a card number; nothing else could match
    calls.clear()
    assert REDACTED in redactor.redact("use ghp_" + "a1B2" * 9)
    assert "github_token" in calls and "openai_key" not in calls


class _Spy:
    def __init__(self, pattern: re.Pattern[str], name: str, calls: list[str]) -> None:
        self.pattern, self.name, self.calls = pattern, name, calls

    def search(self, *args: object) -> re.Match[str] | None:
        self.calls.append(self.name)
        return self.pattern.search(*args)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ time
SIZE = 64 * 1024
# A rule is slow when it takes over BOUND on 64 KB (best of 3) *and* its time grows faster than the input: a
# quarter of the input must take over a quarter of the time (over 1/GROWTH of it). Linear work measures a ratio
# near 4 and quadratic work near 16, so a loaded machine that slows a linear rule past the bound fails nothing.
BOUND = 0.050  # seconds
GROWTH = 8.0

_B64 = base64.b64encode(random.Random(1).randbytes(SIZE)).decode()
GENERIC_SEEDS = (
    "a", "_a", "a-", "a_", "-", "0", "0 ", "4", "a.", ".", '"', "'", "`", " ", "\n", "=", ":", "@", "/", "a=", "a: ",
    '\\"', "a/B1+", _B64, _B64.replace("+", "-").replace("/", "_"), "Aa0", "~", "aws ", "-us",
)
# Inputs built against each rule: repeated prefixes, prefixes followed by almost-long-enough bodies, unterminated
# structures. Every default rule must be listed, so a new rule comes with its hostile inputs.
ADVERSARIAL: dict[str, tuple[str, ...]] = {
    "pem_private_key": ("-----BEGIN ", "-----BEGIN RSA ", "-----BEGIN PRIVATE KEY-----", "-----END ",
                        "-----BEGIN PRIVATE KEY-----\n-----END RSA "),
    "putty_private_key": ("PuTTY-User-Key-File-2:", "PuTTY-User-Key-File-2: P", "Private-MAC: "),
    "openai_key": ("sk-", "sk-a", " sk-" + "a" * 19),
    "stripe_key": ("sk_live_", "sk_live_a", "k_", "k_live_"),
    "stripe_webhook_secret": ("whsec_", " whsec_" + "a" * 23),
    "aws_access_key_id": ("AKIA", " AKIA" + "A" * 15, "A"),
    "aws_secret_access_key": ("aws " + "a/B1" * 10 + " ", "AKIA " + "a/B1" * 10 + ",", "aws " + "aB1/" * 11),
    "github_token": ("ghp_", "github_pat_", "g", " ghp_" + "a" * 35),
    "gitlab_token": ("glpat-", " glpat-" + "a" * 20 + ".", "gl"),
    "slack_token": ("xoxb-", "xapp-", "x", " xoxb-aaaaaaaaa"),
    "huggingface_token": ("hf_", " hf_" + "a" * 29),
    "google_api_key": ("AIza", " AIza" + "a" * 34),
    "google_oauth_secret": ("GOCSPX-", " GOCSPX-" + "a" * 23),
    "google_oauth_token": ("ya29.", " ya29." + "a" * 19),
    "npm_token": ("npm_", " npm_" + "a" * 35),
    "pypi_token": ("pypi-AgE", " pypi-AgE" + "a" * 49),
    "sendgrid_key": ("SG.", " SG." + "a" * 20, " SG." + "a" * 20 + "." + "a" * 29),
    "mailgun_key": ("key-", " key-" + "a" * 31),
    "mailchimp_key": ("0123456789abcdef0123456789abcdef-us", "a-us", "-us"),
    "twilio_api_key": ("SK", " SK" + "a" * 31, "SK0"),
    "twilio_account_sid": ("AC", " AC" + "a" * 31),
    "azure_client_secret": ("Q~", "abc8Q~", " abc8Q~" + "a" * 30),
    "groq_key": ("gsk_", " gsk_" + "a" * 31),
    "replicate_token": ("r8_", " r8_" + "a" * 29),
    "perplexity_key": ("pplx-", " pplx-" + "a" * 31),
    "xai_key": ("xai-", " xai-" + "a" * 39),
    "tavily_key": ("tvly-", " tvly-" + "a" * 19),
    "nvidia_key": ("nvapi-", " nvapi-" + "a" * 39),
    "langsmith_key": ("lsv2_pt_", " lsv2_pt_" + "a" * 31),
    "databricks_token": ("dapi", " dapi" + "a" * 31),
    "vault_token": ("hvs.", " hvs." + "a" * 23),
    "shopify_token": ("shpat_", " shpat_" + "a" * 31),
    "digitalocean_token": ("dop_v1_", " dop_v1_" + "a" * 63),
    "square_token": ("sq0atp-", " sq0atp-" + "a" * 21),
    "postman_key": ("PMAK-", " PMAK-" + "a" * 29),
    "atlassian_token": ("ATATT", " ATATT" + "a" * 49),
    "jwt": ("eyJ", "eyJaaaaaaaa.", "eyJaaaaaaaa.aaaaaaaa.", " eyJaaaaaaaa.aaaaaaaa.aaaaaaa"),
    "discord_bot_token": ("M", " M" + "a" * 24 + ".", " M" + "a" * 24 + ".aaaaaa.", "M.", ".aaaaaa.", "a" * 25 + "."),
    "telegram_bot_token": ("123456789:", " 123456789:" + "a" * 34, "1:"),
    "slack_webhook": ("hooks.slack.com/services/", "hooks.slack.com/services/a"),
    "discord_webhook": ("discord.com/api/webhooks/", "discord.com/api/webhooks/123456/"),
    "card_number": ("4111 ", "4111-", "4", " 4111 1111 1111 ", "4111 111111 "),
    "url_password": ("://", "a://a:", "a://a:a@", "a://:@", "a://a:a@a@", "http://h:8080/"),
    "bearer_token": ("bearer ", "Bearer  ", " bearer aaaaaaa"),
    "authorization_header": ("authorization: ", "Authorization: Bearer ", "authorization"),
    "password_assignment": ("password=", 'password="', "password='", "password: ", "pass=", 'password="password=',
                            "password=password(", "password: a ", 'password="\\', "passphrase: a b c"),
    "pwd_assignment": ("pwd=", "pwd=/", "pw: "),
    "secret_assignment": ("secret=", 'secret"', "secret: ", 'secret="a'),
    "token_assignment": ("token=", "token=token(", "token: ", "token: a ", '\\"token\\": \\"', "token=`"),
    "key_assignment": ("api_key=", "key=", "apikey: ", "api_key=a" * 3 + "("),
    "credential_assignment": ("credentials=", "credential: "),
    "signature_assignment": ("sig=", "&sig="),
    "secret_flag": ("--password ", "--", "--a-password ", " --" + "a" * 32),
}


def _inputs(seed: str, size: int = SIZE) -> list[str]:
    body = (seed * (size // len(seed) + 1))[:size]
    return [body, body[: size - 1] + "("]


def _best_of_3(work: Callable[..., object], *args: object) -> float:
    """The least CPU time of three calls of this thread: what the work costs, not what other processes on a busy
    machine take from it meanwhile."""
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        work(*args)
        best = min(best, time.thread_time() - started)
    return best


def _superlinear(work: Callable[[str], object], make: Callable[[int], str]) -> tuple[float, float] | None:
    """(ms on the full size, growth from a quarter of it) when ``work`` is over BOUND and grows faster than
    linear; None otherwise."""
    full = _best_of_3(work, make(SIZE))
    if full <= BOUND:
        return None
    growth = full / max(_best_of_3(work, make(SIZE // 4)), 1e-9)
    return (round(full * 1000, 1), round(growth, 1)) if growth > GROWTH else None


def test_every_rule_has_adversarial_inputs():
    assert set(ADVERSARIAL) == {rule.name for rule in DEFAULT_RULES}


def test_every_rule_is_linear_on_adversarial_input():
    slow = []
    texts = {seed: _inputs(seed) for seeds in ADVERSARIAL.values() for seed in seeds}
    texts.update({seed: _inputs(seed) for seed in GENERIC_SEEDS})
    folded = {id(t): fold(t) for ts in texts.values() for t in ts}
    for rule in map(_ungated, DEFAULT_RULES):  # a hostile text can hold a trigger: the pattern itself is timed
        for seed in ADVERSARIAL[rule.name] + GENERIC_SEEDS:
            for which, text in enumerate(texts[seed]):
                if _best_of_3(rule.spans, text, folded[id(text)]) <= BOUND:
                    continue
                found = _superlinear(lambda t, r=rule: r.spans(t, fold(t)),
                                     lambda size, s=seed, w=which: _inputs(s, size)[w])
                if found:
                    slow.append((rule.name, seed[:30], *found))
    assert not slow, f"rules over {BOUND * 1000:.0f} ms on 64 KB and superlinear (ms, growth): {slow}"


def test_redact_and_has_secret_are_linear_on_every_adversarial_input(redactor):
    seeds = {seed for seeds in ADVERSARIAL.values() for seed in seeds} | set(GENERIC_SEEDS)
    slow = []
    for seed in sorted(seeds):
        for name, work in (("redact", redactor.redact), ("has_secret", redactor.has_secret)):
            found = _superlinear(work, lambda size, s=seed: _inputs(s, size)[0])
            if found:
                slow.append((name, seed[:30], *found))
    assert not slow, f"over {BOUND * 1000:.0f} ms on 64 KB and superlinear (ms, growth): {slow}"


def test_the_steps_that_used_to_hold_the_callback_for_seconds(redactor):
    """``_a`` runs made the old name scan quadratic (51 s on 32 KB); so did a base64 field next to a token."""
    def step_of(size: int) -> str:
        blob = base64.urlsafe_b64encode(random.Random(2).randbytes(size * 3 // 4)).decode()
        return f'{{"content_b64": "{blob}", "next_page_token": "abc123def456"}}'

    makes = {"_a token": lambda size: "_a" * (size // 2) + " token",
             "_a token=": lambda size: "_a" * (size // 4) + " token=abc123", "base64 step": step_of}
    slow = [(name, *found) for name, make in makes.items() if (found := _superlinear(redactor.redact, make))]
    assert not slow, f"over {BOUND * 1000:.0f} ms on 64 KB and superlinear (ms, growth): {slow}"
    step = step_of(40_000)
    blob = step.split('"')[3]
    out = redactor.redact(step)
    assert blob in out and "abc123def456" not in out


def test_a_secret_whose_name_opens_another_assignments_value_is_found(redactor):
    # found by the fuzz test: the first match took 'password=' as the value of 'password: ' and hid the rest
    for text in ('password: password="00000000000Aa7" ', "token: token=s3cr3tvalue42\n", 'secret=secret="abcdef123"'):
        out = redactor.redact(text)
        assert "00000000000Aa7" not in out and "s3cr3tvalue42" not in out and "abcdef123" not in out, out


def test_a_text_a_log_shows_is_redacted_on_one_line_and_capped(redactor):
    assert redactor.loggable("Dates are  DD.MM.YYYY:\n\tconvert them first.") == (
        "Dates are DD.MM.YYYY: convert them first.")
    assert redactor.loggable("x" * 500, limit=40) == "x" * 37 + "..."
    url = "Connect to postgresql://app:Tr0ub4dor3@db.internal:5432/app before the first query."
    assert redactor.loggable(url) == url.replace("Tr0ub4dor3", REDACTED)
    # what a looser detection pattern still sees once redacted is not shown at all
    assert redactor.loggable("Log in with password: hunter2secret") == f"Log in with password: {REDACTED}"
    for text in ("Use the key sk-abcdefghijklmn for the billing API.", "The password is hunter2, use it"):
        assert redactor.loggable(text) == WITHHELD
    broken = Redactor()
    broken.rules = [Rule("fails", re.compile("e"), keep=lambda text, match: bool(1 / 0))]  # a rule failing fails closed
    assert broken.loggable("The header line ends with a newline.") == WITHHELD
