"""Configuration loading, environment overrides, secrets and validation (SPEC §2)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr, ValidationError

from snowsource.config.fields import AuthType, CompressionType, LogLevel, SecurityProtocol
from snowsource.config.loader import LoadedConfig, load_config, resolve_config_path
from snowsource.config.models import Settings
from snowsource.config.redaction import redacted_dict
from snowsource.core.errors import ConfigError
from snowsource.core.retry import RetryPolicy
from snowsource.engine.wiring import kafka_retries, snow_retry

REPO = Path(__file__).resolve().parents[2]
SECRET = "hunter2-very-secret"

BASE: dict[str, Any] = {
    "snow": {
        "url": "https://acme.service-now.com",
        "auth": {"type": "basic", "username": "integration.user", "password": SECRET},
        "tables": {"incident": {"name": "incident"}},
    }
}

Loader = Callable[..., LoadedConfig]
Problems = Callable[..., list[tuple[str, str]]]


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


_DELETE = object()


@pytest.fixture
def write(tmp_path: Path) -> Callable[[Any], Path]:
    """Write a document (dict → YAML, str → as is) to a config file and return its path."""

    def make(doc: Any) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
        return path

    return make


@pytest.fixture
def load(write: Callable[[Any], Path]) -> Loader:
    """Load ``BASE`` with ``changes`` ({key path tuple: value}) applied, and ``env``."""

    def run(
        changes: Mapping[tuple[str, ...], Any] | None = None,
        env: Mapping[str, str] | None = None,
        doc: Any = None,
    ) -> LoadedConfig:
        data = copy.deepcopy(BASE) if doc is None else doc
        for path, value in (changes or {}).items():
            _set(data, path, value)
        return load_config(write(data), env={} if env is None else env)

    return run


@pytest.fixture
def problems(load: Loader) -> Problems:
    """The ConfigError problems for a config expected to be invalid."""

    def run(*args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        with pytest.raises(ConfigError) as info:
            load(*args, **kwargs)
        assert SECRET not in str(info.value)
        return info.value.problems

    return run


def _paths(found: list[tuple[str, str]]) -> list[str]:
    return [path for path, _ in found]


# ------------------------------------------------------------------------------------------
# The example and the defaults
# ------------------------------------------------------------------------------------------


def test_example_config_loads_cleanly() -> None:
    loaded = load_config(REPO / "config.example.yaml", env={})
    cfg = loaded.settings
    assert loaded.warnings == []
    assert list(cfg.tables) == ["incident", "change_request", "cmdb_ci"]
    assert cfg.snow.url == "http://127.0.0.1:8080"
    assert cfg.snow.instance == "127.0.0.1:8080"
    assert cfg.snow.auth.type is AuthType.BASIC
    assert cfg.snow.auth.username == "admin"
    assert cfg.snow.auth.password is not None
    assert cfg.snow.auth.password.get_secret_value() == "admin"
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.tables["cmdb_ci"].batch_size == 500
    assert cfg.tables["change_request"].topic == "servicenow.change_request"


def test_example_config_documents_every_key() -> None:
    text = (REPO / "config.example.yaml").read_text()
    flat = redacted_dict(load_config(REPO / "config.example.yaml", env={}).settings)

    def keys(node: Mapping[str, Any]) -> set[str]:
        out: set[str] = set()
        for key, value in node.items():
            out.add(key)
            if isinstance(value, Mapping) and key != "tables":
                out |= keys(value)
        return out

    for key in keys(flat) | keys(flat["snow"]["tables"]["incident"]):
        assert f"{key}:" in text, key


def test_defaults_match_the_spec(load: Loader) -> None:
    cfg = load().settings
    dumped = redacted_dict(cfg)
    expected = {
        "name": "servicenow-source",
        "tasks.max": 1,
        "task.id": 0,
        "tasks.assignment": "static",
        "group.session.timeout.ms": 10000,
        "exactly.once": False,
        "value.format": "string",
        "value.schema": "none",
        "health.unready.after.seconds": 300,
        "batch.size": 1000,
        "poll.interval.ms": 5000,
        "overlap.seconds": 10,
        "safety.lag.seconds": 2,
        "dedup.max.entries": 200000,
        "backfill.slices": 4,
        "backfill.max.ahead.rows": 50000,
        "shutdown.timeout.seconds": 30,
        "topic.prefix": "servicenow.",
        "topic.creation.enable": True,
        "topic.creation.partitions": -1,
        "topic.creation.replication.factor": -1,
        "topic.creation.configs": {},
        "offset.storage.topic": "snowsource-offsets",
        "offset.storage.partitions": 25,
        "offset.storage.replication.factor": -1,
    }
    assert {key: dumped[key] for key in expected} == expected
    assert dumped["snow"]["auth"] == {
        "type": "basic",
        "username": "integration.user",
        "password": "***",
        "oauth.grant.type": "client_credentials",
        "oauth.client.id": None,
        "oauth.client.secret": None,
        "oauth.token.url": None,
        "api.key": None,
    }
    assert dumped["snow"]["http"] == {
        "connect.timeout.ms": 10000,
        "request.timeout.ms": 60000,
        "max.concurrent.requests": 8,
        "requests.per.session": 1,
        "retry.initial.backoff.ms": 500,
        "retry.max.backoff.ms": 30000,
        "max.response.bytes": 67108864,
        "proxy.url": None,
        "ca.file": None,
        "max.requests.per.hour": None,
        "rate.limit.headroom": 0.1,
    }
    assert dumped["snow"]["tables"]["incident"] == {
        "name": "incident",
        "topic": "servicenow.incident",
        "query": "",
        "query.domain": True,
        "query.category": None,
        "timestamp.field": "sys_updated_on",
        "id.field": "sys_id",
        "fields": [],
        "display.value": "false",
        "exclude.reference.link": True,
        "start.timestamp": "1970-01-01 00:00:00",
        "deletes": "none",
        "reconcile.interval.seconds": 86400,
        "journal": False,
        "journal.topic": None,
        "batch.size": 1000,
        "poll.interval.ms": 5000,
        "overlap.seconds": 10,
        "safety.lag.seconds": 2,
        "value.format": "string",
        "value.schema": "none",
        "backfill.slices": 4,
        "backfill.max.ahead.rows": 50000,
        "fields.exclude": [],
        "fields.hash": [],
        "fields.mask": [],
        "sensitive.fields": "exclude",
    }
    assert dumped["kafka"] == {
        "bootstrap.servers": "localhost:9092",
        "security.protocol": "PLAINTEXT",
        "sasl.mechanism": None,
        "sasl.username": None,
        "sasl.password": None,
        "ssl.cafile": None,
        "ssl.certfile": None,
        "ssl.keyfile": None,
        "compression.type": "none",
        "linger.ms": 5,
        "max.request.size": 1048576,
        "startup.timeout.seconds": 60,
        "retry": {
            work: {"initial.backoff.ms": 500, "max.backoff.ms": 30000}
            for work in ("offsets", "transactions", "tail")
        },
    }
    assert dumped["rest"] == {
        "enabled": True,
        "host": "127.0.0.1",
        "port": 8083,
        "auth.token": None,
        "console": True,
    }
    assert dumped["log"] == {"format": "auto", "level": "INFO"}
    assert cfg.snow.token_url == "https://acme.service-now.com/oauth_token.do"


# ------------------------------------------------------------------------------------------
# One test per validation rule
# ------------------------------------------------------------------------------------------

T = ("snow", "tables", "incident")

INVALID: list[tuple[str, dict[tuple[str, ...], Any], str, str]] = [
    # (case id, changes, expected key path, fragment of the message)
    ("alias", {("snow", "tables", "Inc-1"): {"name": "x"}}, "snow.tables.Inc-1", "a-z 0-9 _"),
    (
        "name-missing",
        {(*T, "name"): _DELETE, (*T, "query"): "a=1"},
        "snow.tables.incident.name",
        "missing",
    ),
    ("name-chars", {(*T, "name"): "inc/ident"}, "snow.tables.incident.name", "A-Z a-z 0-9 _"),
    (
        "alias-is-no-key",
        {(*T, "alias"): "other"},
        "snow.tables.incident.alias",
        "its key under snow.tables",
    ),
    (
        "fields-item",
        {(*T, "fields"): ["number", "bad field"]},
        "snow.tables.incident.fields[1]",
        "A-Z a-z 0-9 _ .",
    ),
    ("fields-type", {(*T, "fields"): "number"}, "snow.tables.incident.fields", "list"),
    (
        "ts-field",
        {(*T, "timestamp.field"): "sys.updated"},
        "snow.tables.incident.timestamp.field",
        "A-Z a-z 0-9 _",
    ),
    ("id-field", {(*T, "id.field"): "sys-id"}, "snow.tables.incident.id.field", "A-Z a-z 0-9 _"),
    ("cursor-same", {(*T, "timestamp.field"): "sys_id"}, "snow.tables.incident.id.field", "differ"),
    (
        "start-format",
        {(*T, "start.timestamp"): "2024-01-01T00:00:00"},
        "snow.tables.incident.start.timestamp",
        "YYYY-MM-DD HH:MM:SS",
    ),
    (
        "start-date",
        {(*T, "start.timestamp"): "2024-02-30 00:00:00"},
        "snow.tables.incident.start.timestamp",
        "not a real date",
    ),
    (
        "orderby",
        {(*T, "query"): "active=true^ORDERBYnumber"},
        "snow.tables.incident.query",
        "ORDERBY",
    ),
    (
        "orderbydesc",
        {(*T, "query"): "ORDERBYDESCsys_created_on"},
        "snow.tables.incident.query",
        "ORDERBY",
    ),
    (
        "category",
        {(*T, "query.category"): "list&x=1"},
        "snow.tables.incident.query.category",
        "'&'",
    ),
    (
        "display",
        {(*T, "display.value"): "sometimes"},
        "snow.tables.incident.display.value",
        "'all'",
    ),
    ("topic", {(*T, "topic"): "bad topic"}, "snow.tables.incident.topic", "topic name"),
    ("url-missing", {("snow", "url"): _DELETE}, "snow.url", "missing"),
    ("url-scheme", {("snow", "url"): "ftp://acme.service-now.com"}, "snow.url", "https://"),
    ("url-host", {("snow", "url"): "https://"}, "snow.url", "host"),
    ("url-query", {("snow", "url"): "https://acme.service-now.com/?x=1"}, "snow.url", "query"),
    (
        "url-fragment",
        {("snow", "url"): "https://acme.service-now.com/#top"},
        "snow.url",
        "fragment",
    ),
    ("url-creds", {("snow", "url"): "https://u:p@acme.service-now.com"}, "snow.url", "snow.auth"),
    ("no-tables", {("snow", "tables"): {}}, "snow.tables", "at least one table"),
    ("task-id", {("tasks.max",): 2, ("task.id",): 2}, "task.id", "[0, tasks.max)"),
    ("task-id-neg", {("task.id",): -1}, "task.id", "greater than or equal to 0"),
    ("tasks-max", {("tasks.max",): 0}, "tasks.max", "greater than 0"),
    ("batch-low", {("batch.size",): 0}, "batch.size", "greater than or equal to 1"),
    ("batch-high", {("batch.size",): 10001}, "batch.size", "less than or equal to 10000"),
    ("table-batch", {(*T, "batch.size"): 20000}, "snow.tables.incident.batch.size", "10000"),
    ("poll", {("poll.interval.ms",): 0}, "poll.interval.ms", "greater than 0"),
    (
        "table-overlap",
        {(*T, "overlap.seconds"): -1},
        "snow.tables.incident.overlap.seconds",
        "greater than or equal to 0",
    ),
    ("overlap", {("overlap.seconds",): -5}, "overlap.seconds", "greater than or equal to 0"),
    ("lag", {("safety.lag.seconds",): -1}, "safety.lag.seconds", "greater than or equal to 0"),
    ("lag-type", {("safety.lag.seconds",): "two"}, "safety.lag.seconds", "integer"),
    ("dedup", {("dedup.max.entries",): 0}, "dedup.max.entries", "greater than 0"),
    ("shutdown", {("shutdown.timeout.seconds",): 0}, "shutdown.timeout.seconds", "greater than 0"),
    (
        "connect-timeout",
        {("snow", "http", "connect.timeout.ms"): 0},
        "snow.http.connect.timeout.ms",
        "greater than 0",
    ),
    (
        "request-timeout",
        {("snow", "http", "request.timeout.ms"): -1},
        "snow.http.request.timeout.ms",
        "greater than 0",
    ),
    (
        "concurrency",
        {("snow", "http", "max.concurrent.requests"): 0},
        "snow.http.max.concurrent.requests",
        "greater than 0",
    ),
    (
        "per-session-high",
        {("snow", "http", "requests.per.session"): 3},
        "snow.http.requests.per.session",
        "less than or equal to 2",
    ),
    (
        "per-session-zero",
        {("snow", "http", "requests.per.session"): 0},
        "snow.http.requests.per.session",
        "greater than or equal to 1",
    ),
    (
        "backoff",
        {("snow", "http", "retry.initial.backoff.ms"): 60000},
        "snow.http.retry.max.backoff.ms",
        "retry.initial.backoff.ms",
    ),
    (
        "proxy",
        {("snow", "http", "proxy.url"): "socks5://proxy:1080"},
        "snow.http.proxy.url",
        "http",
    ),
    (
        "ca-file",
        {("snow", "http", "ca.file"): "/nonexistent/ca.pem"},
        "snow.http.ca.file",
        "does not exist",
    ),
    ("auth-type", {("snow", "auth", "type"): "kerberos"}, "snow.auth.type", "'oauth2'"),
    ("basic-user", {("snow", "auth", "username"): _DELETE}, "snow.auth.username", "type: basic"),
    ("basic-pass", {("snow", "auth", "password"): _DELETE}, "snow.auth.password", "password.file"),
    (
        "oauth-id",
        {("snow", "auth"): {"type": "oauth2", "oauth.client.secret": SECRET}},
        "snow.auth.oauth.client.id",
        "oauth2",
    ),
    (
        "oauth-secret",
        {("snow", "auth"): {"type": "oauth2", "oauth.client.id": "c"}},
        "snow.auth.oauth.client.secret",
        "oauth2",
    ),
    (
        "oauth-grant",
        {("snow", "auth"): {"type": "oauth2", "oauth.grant.type": "implicit"}},
        "snow.auth.oauth.grant.type",
        "'password'",
    ),
    (
        "oauth-password-grant",
        {
            ("snow", "auth"): {
                "type": "oauth2",
                "oauth.grant.type": "password",
                "oauth.client.id": "c",
                "oauth.client.secret": SECRET,
            }
        },
        "snow.auth.username",
        "grant.type: password",
    ),
    (
        "oauth-token-url",
        {("snow", "auth", "oauth.token.url"): "token.do"},
        "snow.auth.oauth.token.url",
        "https://",
    ),
    ("api-key", {("snow", "auth"): {"type": "api_key"}}, "snow.auth.api.key", "api_key"),
    ("empty-secret", {("snow", "auth", "password"): ""}, "snow.auth.password", "empty"),
    ("numeric-secret", {("snow", "auth", "password"): 1234}, "snow.auth.password", "quote"),
    (
        "servers",
        {("kafka", "bootstrap.servers"): "localhost"},
        "kafka.bootstrap.servers",
        "host:port",
    ),
    ("protocol", {("kafka", "security.protocol"): "TLS"}, "kafka.security.protocol", "SASL_SSL"),
    ("mechanism", {("kafka", "sasl.mechanism"): "GSSAPI"}, "kafka.sasl.mechanism", "SCRAM-SHA-512"),
    ("sasl-needs", {("kafka", "security.protocol"): "SASL_SSL"}, "kafka.sasl.password", "SASL_SSL"),
    ("compression", {("kafka", "compression.type"): "brotli"}, "kafka.compression.type", "'zstd'"),
    ("linger", {("kafka", "linger.ms"): -1}, "kafka.linger.ms", "greater than or equal to 0"),
    (
        "kafka retry max below initial",
        {
            ("kafka", "retry", "tail", "initial.backoff.ms"): 2000,
            ("kafka", "retry", "tail", "max.backoff.ms"): 1000,
        },
        "kafka.retry.tail.max.backoff.ms",
        "must be >= initial.backoff.ms (2000)",
    ),
    (
        "startup",
        {("kafka", "startup.timeout.seconds"): 0},
        "kafka.startup.timeout.seconds",
        "greater than 0",
    ),
    (
        "ssl-file",
        {("kafka", "ssl.cafile"): "/nonexistent/ca.pem"},
        "kafka.ssl.cafile",
        "does not exist",
    ),
    ("partitions", {("topic.creation.partitions",): 0}, "topic.creation.partitions", "-1"),
    (
        "replication",
        {("topic.creation.replication.factor",): -2},
        "topic.creation.replication.factor",
        "-1",
    ),
    (
        "offsets-rf",
        {("offset.storage.replication.factor",): 0},
        "offset.storage.replication.factor",
        "-1",
    ),
    (
        "offsets-partitions",
        {("offset.storage.partitions",): 0},
        "offset.storage.partitions",
        "greater than 0",
    ),
    ("offsets-topic", {("offset.storage.topic",): "a/b"}, "offset.storage.topic", "topic name"),
    ("prefix", {("topic.prefix",): "bad prefix "}, "topic.prefix", "A-Z"),
    ("port", {("rest", "port"): 65536}, "rest.port", "65535"),
    ("rest-host", {("rest", "host"): ""}, "rest.host", "at least 1"),
    ("log-format", {("log", "format"): "xml"}, "log.format", "'console'"),
    ("log-level", {("log", "level"): "LOUD"}, "log.level", "'DEBUG'"),
    ("section-type", {("kafka",): "localhost:9092"}, "kafka", "mapping"),
    ("name", {("name",): ""}, "name", "at least 1"),
]


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [pytest.param(changes, path, fragment, id=case) for case, changes, path, fragment in INVALID],
)
def test_each_rule_names_the_key_and_what_is_allowed(
    load: Loader, changes: dict[tuple[str, ...], Any], path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(changes)
    found = info.value.problems
    messages = [message for key, message in found if key == path]
    assert messages, found
    assert any(fragment in message for message in messages), found
    assert f"\n  {path}: " in str(info.value)
    assert SECRET not in str(info.value)


def test_every_problem_is_reported_at_once(problems: Problems) -> None:
    found = problems(
        {
            ("batch.size",): 0,
            ("kafka", "linger.ms"): -1,
            ("rest", "port"): -1,
            (*T, "start.timestamp"): "yesterday",
            ("snow", "tables", "other"): {"name": "change_request", "query": "ORDERBYnumber"},
        }
    )
    assert set(_paths(found)) >= {
        "batch.size",
        "kafka.linger.ms",
        "rest.port",
        "snow.tables.incident.start.timestamp",
        "snow.tables.other.query",
    }


def test_unknown_key_names_its_path_and_suggests_the_right_one(problems: Problems) -> None:
    found = problems({("batch_size",): 100, (*T, "timestamp_field"): "x", ("kafka", "lingr.ms"): 1})
    by_path = dict(found)
    assert "did you mean 'batch.size'" in by_path["batch_size"]
    assert "did you mean 'timestamp.field'" in by_path["snow.tables.incident.timestamp_field"]
    assert "did you mean 'linger.ms'" in by_path["kafka.lingr.ms"]


def test_unknown_key_never_echoes_its_value(problems: Problems) -> None:
    found = problems({("snow", "auth", "pasword"): SECRET})  # the fixture asserts no SECRET
    assert "snow.auth.pasword" in _paths(found)


def test_duplicate_yaml_key_is_an_error(problems: Problems) -> None:
    text = (
        "snow:\n  url: https://a.service-now.com\n"
        "  auth: {username: u, password: p}\n"
        "  tables:\n    incident: {name: incident}\n    incident: {name: problem}\n"
    )
    found = problems(doc=text)
    assert ("snow.tables.incident", "duplicate key (again on line 6): keep one") in found


def test_unquoted_timestamp_stays_a_string(write: Callable[[Any], Path]) -> None:
    text = yaml.safe_dump(BASE).replace(
        "name: incident", "name: incident\n      start.timestamp: 2024-05-01 12:30:00"
    )
    cfg = load_config(write(text), env={}).settings
    assert cfg.tables["incident"].start_timestamp == "2024-05-01 12:30:00"
    assert cfg.tables["incident"].start_datetime.isoformat() == "2024-05-01T12:30:00+00:00"


def test_missing_file_names_the_path_and_how_to_pass_one(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, env={})
    text = str(info.value)
    assert str(missing) in text
    assert "--config" in text
    assert "SNOWSOURCE_CONFIG" in text


def test_yaml_syntax_error_names_the_line(write: Callable[[Any], Path]) -> None:
    path = write("snow:\n  url: https://a\n  auth: {username: u}\n   password: p\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert f"{path}: YAML syntax error at line 4" in str(info.value)


def test_top_level_must_be_a_mapping(write: Callable[[Any], Path]) -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write("- a\n- b\n"), env={})


def test_config_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"SNOWSOURCE_CONFIG": "/etc/snow.yaml"}
    assert resolve_config_path("x.yaml", env) == Path("x.yaml")
    assert resolve_config_path(None, env) == Path("/etc/snow.yaml")
    assert resolve_config_path(None, {}) == Path("config.yaml")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(BASE))
    assert load_config(None, env={}).path == Path("config.yaml")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**BASE, "name": "from-env-path"}))
    loaded = load_config(None, env={"SNOWSOURCE_CONFIG": str(other)})
    assert loaded.settings.name == "from-env-path"
    assert loaded.path == other


# ------------------------------------------------------------------------------------------
# Environment overrides
# ------------------------------------------------------------------------------------------


def test_environment_wins_over_the_file(load: Loader) -> None:
    cfg = load(
        {("tasks.max",): 3, ("kafka", "bootstrap.servers"): "file:9092"},
        env={
            "SNOWSOURCE_SNOW__AUTH__PASSWORD": "from-env",
            "SNOWSOURCE_KAFKA__BOOTSTRAP_SERVERS": "b1:9092,b2:9092",
            "SNOWSOURCE_TASKS_MAX": "4",
            "SNOWSOURCE_TASK_ID": "3",
            "SNOWSOURCE_SNOW__HTTP__CONNECT_TIMEOUT_MS": "2500",
            "SNOWSOURCE_TOPIC_CREATION_ENABLE": "false",
            "SNOWSOURCE_LOG__LEVEL": "debug",
        },
    ).settings
    assert cfg.snow.auth.password == SecretStr("from-env")
    assert cfg.kafka.bootstrap_servers == "b1:9092,b2:9092"
    assert (cfg.tasks_max, cfg.task_id) == (4, 3)
    assert cfg.snow.http.connect_timeout_ms == 2500
    assert cfg.topic_creation_enable is False
    assert cfg.log.level is LogLevel.DEBUG
    # Keys the environment does not mention keep the file's values.
    assert cfg.snow.auth.username == "integration.user"


def test_environment_table_query_by_alias(load: Loader) -> None:
    cfg = load(
        {("snow", "tables", "change_request"): {"name": "change_request", "query": "a=1"}},
        env={"SNOWSOURCE_SNOW__TABLES__CHANGE_REQUEST__QUERY": "active=true^priority<=2"},
    ).settings
    assert cfg.tables["change_request"].query == "active=true^priority<=2"
    assert cfg.tables["change_request"].name == "change_request"
    assert cfg.tables["incident"].query == ""


def test_environment_can_create_a_table_and_it_comes_last(load: Loader) -> None:
    cfg = load(
        env={
            "SNOWSOURCE_SNOW__TABLES__PROBLEM__NAME": "problem",
            "SNOWSOURCE_SNOW__TABLES__PROBLEM__FIELDS": '["number", "state"]',
            "SNOWSOURCE_SNOW__TABLES__PROBLEM__DISPLAY_VALUE": "all",
        }
    ).settings
    assert list(cfg.tables) == ["incident", "problem"]
    problem = cfg.tables["problem"]
    assert problem.alias == "problem"
    assert problem.fields == ["number", "state"]
    assert problem.display_value == "all"
    assert problem.topic == "servicenow.problem"


def test_environment_only_table_still_needs_a_name(problems: Problems) -> None:
    found = problems(env={"SNOWSOURCE_SNOW__TABLES__PROBLEM__QUERY": "active=true"})
    assert "snow.tables.problem.name" in _paths(found)


def test_environment_json_for_lists_and_mappings(load: Loader, problems: Problems) -> None:
    cfg = load(env={"SNOWSOURCE_TOPIC_CREATION_CONFIGS": '{"cleanup.policy": "compact"}'}).settings
    assert cfg.topic_creation_configs == {"cleanup.policy": "compact"}
    found = problems(env={"SNOWSOURCE_SNOW__TABLES__INCIDENT__FIELDS": "number,state"})
    by_path = dict(found)
    assert (
        "SNOWSOURCE_SNOW__TABLES__INCIDENT__FIELDS must be JSON"
        in (by_path["snow.tables.incident.fields"])
    )


def test_empty_environment_value_nulls_a_nullable_key(load: Loader) -> None:
    cfg = load(
        {(*T, "query.category"): "list"},
        env={"SNOWSOURCE_SNOW__TABLES__INCIDENT__QUERY_CATEGORY": ""},
    ).settings
    assert cfg.tables["incident"].query_category is None


def test_empty_environment_value_makes_a_tables_key_inherit_as_null_does(load: Loader) -> None:
    cfg = load(
        {("batch.size",): 200, (*T, "batch.size"): 500, (*T, "topic"): "custom.incident"},
        env={
            "SNOWSOURCE_SNOW__TABLES__INCIDENT__BATCH_SIZE": "",
            "SNOWSOURCE_SNOW__TABLES__INCIDENT__TOPIC": " ",
        },
    ).settings
    incident = cfg.tables["incident"]
    assert incident.batch_size == 200  # the top-level value, not the file's 500
    assert incident.topic == "servicenow.incident"


def test_environment_values_are_validated_with_their_key_path(problems: Problems) -> None:
    found = problems(env={"SNOWSOURCE_BATCH_SIZE": "lots"})
    assert "batch.size" in _paths(found)


def test_unknown_environment_variables_warn_but_reserved_do_not(load: Loader) -> None:
    loaded = load(
        env={
            "SNOWSOURCE_CONFIG": "ignored-because-a-path-is-given.yaml",
            "SNOWSOURCE_TEST_KAFKA": "localhost:9092",
            "SNOWSOURCE_SNOW__AUTH__PASWORD": SECRET,
            "SNOWSOURCE_TASKS_MAX__EXTRA": "1",
            "SNOWSOURCE_NOPE": "1",
            "PATH": "/usr/bin",
            "OTHER_SNOWSOURCE_X": "1",
        }
    )
    joined = "\n".join(loaded.warnings)
    assert len(loaded.warnings) == 3, loaded.warnings
    assert "SNOWSOURCE_SNOW__AUTH__PASWORD" in joined
    assert "SNOWSOURCE_TASKS_MAX__EXTRA" in joined
    assert "SNOWSOURCE_NOPE" in joined
    assert SECRET not in joined
    assert "SNOWSOURCE_CONFIG" not in joined
    assert "SNOWSOURCE_TEST_KAFKA" not in joined


def test_load_config_reads_os_environ_by_default(
    write: Callable[[Any], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SNOWSOURCE_OVERLAP_SECONDS", "42")
    cfg = load_config(write(BASE)).settings
    assert cfg.overlap_seconds == 42
    assert cfg.tables["incident"].overlap_seconds == 42


def test_settings_built_directly_ignore_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NAME", "from-env")
    monkeypatch.setenv("SNOWSOURCE_NAME", "from-env")
    cfg = Settings(**copy.deepcopy(BASE))
    assert cfg.name == "servicenow-source"
    assert cfg.tables["incident"].topic == "servicenow.incident"


# ------------------------------------------------------------------------------------------
# Secret files
# ------------------------------------------------------------------------------------------


def test_secret_file_strips_one_trailing_newline(load: Loader, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n\n")
    token = tmp_path / "token"
    token.write_bytes(b"tok\r\n")
    sasl = tmp_path / "sasl"
    sasl.write_text("no-newline")
    cfg = load(
        {
            ("snow", "auth", "password"): _DELETE,
            ("snow", "auth", "password.file"): str(secret),
            ("rest", "auth.token.file"): str(token),
            ("kafka",): {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "u",
                "sasl.password.file": str(sasl),
            },
        }
    ).settings
    assert cfg.snow.auth.password == SecretStr("s3cret\n")
    assert cfg.rest.auth_token == SecretStr("tok")
    assert cfg.kafka.sasl_password == SecretStr("no-newline")
    assert cfg.kafka.sasl_mechanism == "SCRAM-SHA-512"


def test_secret_file_from_environment_replaces_plain_key_in_file(
    load: Loader, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-file-in-env\n")
    cfg = load(env={"SNOWSOURCE_SNOW__AUTH__PASSWORD_FILE": str(secret)}).settings
    assert cfg.snow.auth.password == SecretStr("from-file-in-env")


def test_plain_secret_from_environment_replaces_file_in_config(
    load: Loader, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-config-file\n")
    cfg = load(
        {("snow", "auth", "password"): _DELETE, ("snow", "auth", "password.file"): str(secret)},
        env={"SNOWSOURCE_SNOW__AUTH__PASSWORD": "from-env"},
    ).settings
    assert cfg.snow.auth.password == SecretStr("from-env")


def test_secret_and_its_file_in_one_source_is_an_error(problems: Problems, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("x")
    found = problems({("snow", "auth", "password.file"): str(secret)})
    assert "snow.auth.password.file" in _paths(found)
    assert "not both" in dict(found)["snow.auth.password.file"]


def test_unreadable_secret_file_names_the_key(problems: Problems, tmp_path: Path) -> None:
    found = problems(
        {("snow", "auth", "password"): _DELETE},
        env={"SNOWSOURCE_SNOW__AUTH__PASSWORD_FILE": str(tmp_path / "missing")},
    )
    assert _paths(found) == ["snow.auth.password.file"]
    assert "cannot read secret file" in found[0][1]
    assert "environment" in found[0][1]


def test_file_suffix_only_for_secrets(problems: Problems) -> None:
    found = problems({("snow", "auth", "username.file"): "/tmp/u"})
    assert "snow.auth.username.file" in _paths(found)


# ------------------------------------------------------------------------------------------
# Secrets never shown
# ------------------------------------------------------------------------------------------


def test_secrets_never_appear_in_repr_str_dump_or_redacted(load: Loader) -> None:
    cfg = load(
        {
            ("snow", "auth"): {
                "type": "oauth2",
                "oauth.client.id": "client",
                "oauth.client.secret": SECRET + "-oauth",
                "api.key": SECRET + "-key",
                "username": "u",
                "password": SECRET,
            },
            ("snow", "http", "proxy.url"): f"http://user:{SECRET}-proxy@proxy:3128",
            ("rest", "auth.token"): SECRET + "-token",
            ("kafka",): {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": SECRET + "-sasl",
            },
        }
    ).settings
    redacted = redacted_dict(cfg)
    for shown in (repr(cfg), str(cfg), str(redacted)):
        assert SECRET not in shown
    # model_dump keeps the proxy URL as given (it is not one of the five secrets), nothing else.
    for dumped in (str(cfg.model_dump()), cfg.model_dump_json()):
        assert SECRET not in dumped.replace(f"user:{SECRET}-proxy", "")
    assert redacted["snow"]["auth"]["password"] == "***"
    assert redacted["snow"]["auth"]["oauth.client.secret"] == "***"
    assert redacted["snow"]["auth"]["api.key"] == "***"
    assert redacted["kafka"]["sasl.password"] == "***"
    assert redacted["rest"]["auth.token"] == "***"
    assert redacted["snow"]["http"]["proxy.url"] == "http://user:***@proxy:3128"
    assert cfg.snow.auth.oauth_client_secret == SecretStr(SECRET + "-oauth")


def test_redacted_dict_shows_unset_secrets_as_none(load: Loader) -> None:
    redacted = redacted_dict(load().settings)
    assert redacted["rest"]["auth.token"] is None
    assert redacted["kafka"]["sasl.password"] is None


# ------------------------------------------------------------------------------------------
# Source partitions
# ------------------------------------------------------------------------------------------


def _two(first: dict[str, Any], second: dict[str, Any]) -> dict[tuple[str, ...], Any]:
    return {("snow", "tables"): {"a": first, "b": second}}


def test_same_partition_through_reordered_query_is_an_error(problems: Problems) -> None:
    found = problems(
        _two(
            {"name": "incident", "query": "active=true^priority=1"},
            {"name": "incident", "query": " priority=1 ^active=true^EQ", "topic": "other"},
        )
    )
    assert _paths(found) == ["snow.tables.b"]
    assert "'a'" in found[0][1]
    assert "same source partition" in found[0][1]


def test_same_table_without_query_twice_is_an_error(problems: Problems) -> None:
    found = problems(_two({"name": "incident"}, {"name": "incident", "fields": ["number"]}))
    assert _paths(found) == ["snow.tables.b"]


@pytest.mark.parametrize(
    "second",
    [
        {"name": "incident", "query": "active=true", "query.domain": False},
        {"name": "incident", "query": "active=true", "timestamp.field": "sys_created_on"},
        {"name": "incident", "query": "active=false"},
        {"name": "problem", "query": "active=true"},
    ],
)
def test_distinct_partitions_are_fine(load: Loader, second: dict[str, Any]) -> None:
    cfg = load(_two({"name": "incident", "query": "active=true"}, second)).settings
    assert list(cfg.tables) == ["a", "b"]


def test_instance_drops_default_port_and_lowercases(load: Loader) -> None:
    cfg = load({("snow", "url"): "https://ACME.Service-Now.com:443/"}).settings
    assert cfg.snow.instance == "acme.service-now.com"
    assert cfg.snow.url == "https://ACME.Service-Now.com:443"
    cfg = load({("snow", "url"): "http://Localhost:8080"}).settings
    assert cfg.snow.instance == "localhost:8080"
    assert cfg.snow.token_url == "http://Localhost:8080/oauth_token.do"


# ------------------------------------------------------------------------------------------
# Per-table resolution and value mapping
# ------------------------------------------------------------------------------------------


def test_tables_inherit_top_level_values_unless_they_override(load: Loader) -> None:
    cfg = load(
        {
            ("batch.size",): 200,
            ("poll.interval.ms",): 100,
            ("overlap.seconds",): 0,
            ("safety.lag.seconds",): 5,
            ("topic.prefix",): "snow.",
            ("snow", "tables", "change_request"): {
                "name": "change_request",
                "batch.size": 50,
                "overlap.seconds": 30,
                "topic": "changes",
            },
        }
    ).settings
    incident, change = cfg.tables["incident"], cfg.tables["change_request"]
    assert (incident.batch_size, incident.poll_interval_ms) == (200, 100)
    assert (incident.overlap_seconds, incident.safety_lag_seconds) == (0, 5)
    assert incident.topic == "snow.incident"
    assert (change.batch_size, change.overlap_seconds, change.poll_interval_ms) == (50, 30, 100)
    assert change.topic == "changes"
    assert change.alias == "change_request"


def test_invalid_top_level_value_is_reported_once(problems: Problems) -> None:
    found = problems({("batch.size",): 0})
    assert _paths(found) == ["batch.size"]


@pytest.mark.parametrize(
    ("given", "expected"), [(True, "true"), (False, "false"), ("ALL", "all"), ("true", "true")]
)
def test_display_value_accepts_yaml_booleans(load: Loader, given: Any, expected: str) -> None:
    cfg = load({(*T, "display.value"): given}).settings
    assert cfg.tables["incident"].display_value == expected


def test_enums_and_configs_are_normalised(load: Loader) -> None:
    cfg = load(
        {
            ("kafka", "security.protocol"): "ssl",
            ("kafka", "compression.type"): "GZIP",
            ("log", "level"): "warn",
            ("topic.creation.configs",): {"retention.ms": 86400000, "compact": True},
            ("kafka", "bootstrap.servers"): ["b1:9092", "b2:9093"],
            (*T, "query"): None,
        }
    ).settings
    assert cfg.kafka.security_protocol is SecurityProtocol.SSL
    assert cfg.kafka.compression_type is CompressionType.GZIP
    assert cfg.log.level is LogLevel.WARNING
    assert cfg.topic_creation_configs == {"retention.ms": "86400000", "compact": "true"}
    assert cfg.kafka.bootstrap_servers == "b1:9092,b2:9093"
    assert cfg.tables["incident"].query == ""


def test_models_are_frozen(load: Loader) -> None:
    cfg = load().settings
    with pytest.raises(ValidationError):
        cfg.name = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        cfg.tables["incident"].batch_size = 5  # type: ignore[misc]


@pytest.mark.parametrize("name", ["snappy", "lz4", "zstd"])
def test_compression_codec_needs_its_extra(name: str, load: Loader, problems: Problems) -> None:
    from aiokafka import codec

    installed = getattr(codec, f"has_{name}")()
    changes = {("kafka", "compression.type"): name}
    if installed:
        assert load(changes).settings.kafka.compression_type.value == name
        return
    found = problems(changes)
    assert _paths(found) == ["kafka.compression.type"]
    assert f"aiokafka[{name}]" in found[0][1]


def test_kafka_work_retries_by_its_own_settings_not_the_http_ones(load: Loader) -> None:
    settings = load(
        {
            ("snow", "http", "retry.initial.backoff.ms"): 700,
            ("kafka", "retry", "offsets", "initial.backoff.ms"): 100,
            ("kafka", "retry", "offsets", "max.backoff.ms"): 2000,
            ("kafka", "retry", "transactions", "initial.backoff.ms"): 200,
            ("kafka", "retry", "tail", "max.backoff.ms"): 4000,
        }
    ).settings
    retries = kafka_retries(settings)
    assert retries.offsets == RetryPolicy(0.1, 2.0)
    assert retries.transactions == RetryPolicy(0.2, 30.0)
    assert retries.tail == RetryPolicy(0.5, 4.0)
    assert snow_retry(settings) == RetryPolicy(0.7, 30.0)
