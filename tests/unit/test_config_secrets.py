"""Config errors and the effective configuration never show a secret.

Each case writes a secret where a user might (a URL's userinfo, a misspelt key, a wrong type, a
whole section) and searches the error for the secret itself, its URL-encoded forms and the
base64 ``user:password`` of Basic auth.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import yaml
from pydantic import ValidationError

from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.config.redaction import config_secrets, mask_userinfo, redacted_dict
from snowsource.core.errors import ConfigError
from snowsource.observability import logs
from snowsource.observability.redact import redact, register_config
from tests.secrets_support import empty_secret_registry

USER = "integration.user"
# Characters that URL parsers split on (':', '@', '/', '#') so a half-masked URL would show.
SECRET = "Hunter2:p@ss/w#rd"
ENCODED = quote(SECRET, safe="")
NEEDLES = (
    SECRET,
    ENCODED,
    quote_plus(SECRET),
    base64.b64encode(f"{USER}:{SECRET}".encode()).decode(),
    "Hunter2",  # any fragment of it
)

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": USER, "password": "not-the-needle"},
        "tables": {"incident": {"name": "incident"}},
    }
}


def _doc(changes: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return doc


def _error(tmp_path: Path, doc: Any, env: dict[str, str] | None = None) -> ConfigError:
    path = tmp_path / "config.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    return info.value


def _assert_clean(text: str) -> None:
    for needle in NEEDLES:
        assert needle not in text, (needle, text)


URL_IN_USERINFO = f"https://{USER}:{SECRET}@acme.service-now.com"

CASES: list[tuple[str, dict[tuple[str, ...], Any], str]] = [
    ("snow-url-raw", {("snow", "url"): URL_IN_USERINFO}, "snow.url"),
    ("snow-url-encoded", {("snow", "url"): f"https://{USER}:{ENCODED}@acme.sn.com"}, "snow.url"),
    (
        "snow-url-bad-port",
        {("snow", "url"): f"https://{USER}:{ENCODED}@acme.sn.com:port"},
        "snow.url",
    ),
    (
        "proxy-scheme",
        {("snow", "http", "proxy.url"): f"socks5://{USER}:{ENCODED}@proxy:1080"},
        "snow.http.proxy.url",
    ),
    (
        "proxy-query",
        {("snow", "http", "proxy.url"): f"http://{USER}:{ENCODED}@proxy:3128/?x=1"},
        "snow.http.proxy.url",
    ),
    (
        "token-url",
        {("snow", "auth", "oauth.token.url"): f"https://{USER}:{ENCODED}@acme.sn.com/t"},
        "snow.auth.oauth.token.url",
    ),
    ("misspelt-password", {("snow", "auth", "pasword"): SECRET}, "snow.auth.pasword"),
    ("misspelt-sasl", {("kafka", "sasl.pasword"): SECRET}, "kafka.sasl.pasword"),
    ("misspelt-token", {("rest", "auth.tokn"): SECRET}, "rest.auth.tokn"),
    ("top-level-password", {("password",): SECRET}, "password"),
    ("table-password", {("snow", "tables", "incident", "password"): SECRET}, "snow.tables"),
    ("secret-as-list", {("snow", "auth", "password"): [SECRET]}, "snow.auth.password"),
    ("secret-as-mapping", {("snow", "auth", "password"): {"v": SECRET}}, "snow.auth.password"),
    ("section-as-string", {("snow", "auth"): SECRET}, "snow.auth"),
    ("kafka-as-string", {("kafka",): SECRET}, "kafka"),
    (
        "servers-with-userinfo",
        {("kafka", "bootstrap.servers"): f"https://u:{SECRET}@broker:9092"},
        "kafka.bootstrap.servers",
    ),
    ("secret-in-unknown-section", {("snow", "creds"): {"password": SECRET}}, "snow.creds"),
]


@pytest.mark.parametrize(("changes", "key"), [pytest.param(c, k, id=case) for case, c, k in CASES])
def test_config_errors_never_show_the_secret(
    tmp_path: Path, changes: dict[tuple[str, ...], Any], key: str
) -> None:
    error = _error(tmp_path, _doc(changes))
    assert any(path.startswith(key) for path, _ in error.problems), error.problems
    _assert_clean(str(error))


def test_url_errors_still_show_the_url_with_credentials_masked(tmp_path: Path) -> None:
    error = _error(tmp_path, _doc({("snow", "url"): URL_IN_USERINFO}))
    assert f"(got 'https://{USER}:***@acme.service-now.com')" in str(error)


def test_environment_secrets_are_never_shown(tmp_path: Path) -> None:
    error = _error(
        tmp_path,
        copy.deepcopy(BASE),
        env={
            "SNOWSOURCE_SNOW__URL": URL_IN_USERINFO,
            "SNOWSOURCE_SNOW__AUTH": f'{{"pasword": "{SECRET}"}}',
        },
    )
    paths = [path for path, _ in error.problems]
    assert "snow.url" in paths
    assert "snow.auth.pasword" in paths
    _assert_clean(str(error))


def test_misspelt_secret_variable_is_a_warning_without_its_value(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(BASE))
    loaded = load_config(path, env={"SNOWSOURCE_SNOW__AUTH__PASWORD": SECRET})
    assert any("SNOWSOURCE_SNOW__AUTH__PASWORD" in w for w in loaded.warnings)
    _assert_clean("\n".join(loaded.warnings))


def test_yaml_syntax_error_on_the_secret_line_does_not_quote_it(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE).replace("not-the-needle", f'"{SECRET}')
    error = _error(tmp_path, text)
    assert "YAML syntax error" in str(error)
    _assert_clean(str(error))


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("https://admin:pw@host/x", "https://admin:***@host/x"),
        ("http://token@host", "http://***@host"),
        ("see https://a:b@c and ftp://d:e@f", "see https://a:***@c and ftp://d:***@f"),
        ("https://host/no/credentials", "https://host/no/credentials"),
        ("user@example.com", "user@example.com"),  # not a URL: nothing to mask
    ],
)
def test_mask_userinfo(given: str, shown: str) -> None:
    assert mask_userinfo(given) == shown


def test_effective_configuration_log_masks_secrets_only(tmp_path: Path) -> None:
    # The emulator's defaults: the username equals the password.
    doc = _doc({("snow", "auth", "username"): "admin", ("snow", "auth", "password"): "admin"})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path, env={}).settings
    with empty_secret_registry():
        logs.register_secrets(["admin"])
        event = logs.redact_secrets(
            None,
            "info",
            {"event": "effective configuration", "config": redacted_dict(cfg), "note": "admin x"},
        )
    assert event["config"]["snow"]["auth"]["username"] == "admin"
    assert event["config"]["snow"]["auth"]["password"] == "***"
    # Everything else still goes through the value scrubber.
    assert event["note"] == "*** x"


def test_settings_built_directly_do_not_quote_inputs_in_their_errors() -> None:
    doc = _doc({("snow", "url"): URL_IN_USERINFO, ("snow", "auth", "pasword"): SECRET})
    with pytest.raises(ValidationError) as info:
        Settings(**doc)
    assert "snow.url" in str(info.value)
    _assert_clean(str(info.value))


def test_the_redactor_learns_every_secret_from_the_configuration_walk(tmp_path: Path) -> None:
    """No list of secret keys anywhere: a ``SecretStr`` field, with the user name beside it,
    and a URL's ``user:password@`` are found by walking the model."""
    doc = _doc(
        {
            ("snow", "auth"): {
                "type": "oauth2",
                "oauth.grant.type": "password",
                "oauth.client.id": "client",
                "oauth.client.secret": "client-secret-1",
                "username": USER,
                "password": SECRET,
            },
            ("snow", "http", "proxy.url"): f"http://proxyuser:{ENCODED}x@proxy:3128",
            ("kafka", "security.protocol"): "SASL_PLAINTEXT",
            ("kafka", "sasl.mechanism"): "PLAIN",
            ("kafka", "sasl.username"): "kafka-user",
            ("kafka", "sasl.password"): "sasl-secret-2",
            ("rest", "auth.token"): "rest-token-3",
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    settings = load_config(path, env={}).settings
    found = {(s.value, s.username) for s in config_secrets(settings)}
    assert {
        ("client-secret-1", None),
        (SECRET, USER),
        (SECRET + "x", "proxyuser"),
        ("sasl-secret-2", "kafka-user"),
        ("rest-token-3", None),
    } <= found
    with empty_secret_registry():
        register_config(settings)
        text = " ".join(
            [
                "client-secret-1",
                quote(SECRET + "x", safe=""),
                "sasl-secret-2",
                "rest-token-3",
                base64.b64encode(b"kafka-user:sasl-secret-2").decode(),
                *NEEDLES[:-1],  # the last is a fragment, not a secret of its own
            ]
        )
        shown = redact(text)
    for secret in ("client-secret-1", "sasl-secret-2", "rest-token-3", "kafka-user:"):
        assert secret not in shown
    _assert_clean(shown)
    assert "x" not in shown.replace("***", "").replace(" ", ""), shown
