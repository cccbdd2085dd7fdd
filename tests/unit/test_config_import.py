"""``snowsource config import``: Java and Confluent connector configs to YAML that loads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from snowsource.cli.main import main
from snowsource.config.loader import load_config
from snowsource.config.models import Settings
from snowsource.core.connector_import import import_connector, render_yaml

JAVA: dict[str, Any] = {
    "name": "servicenow-source",
    "config": {
        "connector.class": "com.example.servicenow.ServiceNowSourceConnector",
        "tasks.max": "2",
        "snow.url": "https://acme.service-now.com",
        "snow.auth.type": "basic",
        "snow.auth.username": "integration.user",
        "snow.auth.password": "s3cret-Pa55",
        "snow.tables": "incident, Change-Request",
        "snow.table.incident.name": "incident",
        "snow.table.incident.query": "active=true^priority<=2",
        "snow.table.incident.query.domain": "false",
        "snow.table.incident.fields": "number,short_description",
        "snow.table.incident.display.value": "all",
        "snow.table.incident.exclude.reference.link": "false",
        "snow.table.incident.start.timestamp": "2024-01-01 00:00:00",
        "snow.table.incident.topic": "servicenow.incidents",
        "snow.table.Change-Request.name": "change_request",
        "snow.table.Change-Request.timestamp.field": "sys_created_on",
        "snow.table.Change-Request.query.category": "replica",
        "snow.table.problem.name": "problem",
        "topic.prefix": "sn.",
        "batch.size": "500",
        "poll.interval.ms": "10000",
        "snow.source.overlap.seconds": "30",
        "safety.lag.seconds": "5",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "transforms": "route",
        "snow.frobnicate": "yes",
    },
}
UNMAPPED_JAVA = (
    "connector.class",
    "snow.table.problem.name",
    "value.converter",
    "transforms",
    "snow.frobnicate",
)
CONFLUENT: dict[str, Any] = {
    "name": "ServiceNowSourceConnector",
    "connector.class": "io.confluent.connect.servicenow.ServiceNowSourceConnector",
    "tasks.max": "1",
    "servicenow.url": "https://acme.service-now.com/",
    "servicenow.user": "integration.user",
    "servicenow.password": "s3cret-Pa55",
    "servicenow.table": "incident",
    "kafka.topic": "sn-incidents",
    "servicenow.since": "2024-03-01",
    "batch.max.rows": "200",
    "poll.interval.s": "15",
    "confluent.topic.bootstrap.servers": "broker:9092",
    "confluent.license": "LICENSE-KEY-123",
    "servicenow.ssl.truststore.path": "/etc/ts.jks",
}
PASSWORD_ENV = {"SNOWSOURCE_SNOW__AUTH__PASSWORD": "from-env"}


def _import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any, *args: str
) -> tuple[int, str, str]:
    source = tmp_path / "connector.json"
    source.write_bytes(orjson.dumps(document))
    code = main(["config", "import", str(source), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _load(tmp_path: Path, text: str, env: dict[str, str]) -> Settings:
    target = tmp_path / "imported.yaml"
    target.write_text(text, encoding="utf-8")
    return load_config(target, env=env).settings


def test_java_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _import(tmp_path, capsys, JAVA)
    assert (code, err) == (0, "")
    assert "s3cret-Pa55" not in out
    assert "SNOWSOURCE_SNOW__AUTH__PASSWORD" in out
    comments = [line for line in out.splitlines() if line.startswith("#")]
    for key in UNMAPPED_JAVA:
        assert any(f"#   {key} = " in line for line in comments), key
    s = _load(tmp_path, out, PASSWORD_ENV)
    assert (s.name, s.tasks_max, s.snow.url) == ("servicenow-source", 2, JAVA["config"]["snow.url"])
    assert s.snow.auth.username == "integration.user"
    assert s.snow.auth.password is not None
    assert s.snow.auth.password.get_secret_value() == "from-env"
    assert list(s.tables) == ["incident", "change_request"]
    inc = s.tables["incident"]
    assert (inc.name, inc.query, inc.query_domain) == ("incident", "active=true^priority<=2", False)
    assert inc.fields == ["number", "short_description"]
    assert (inc.display_value, inc.exclude_reference_link) == ("all", False)
    assert (inc.start_timestamp, inc.topic) == ("2024-01-01 00:00:00", "servicenow.incidents")
    assert (inc.batch_size, inc.poll_interval_ms, inc.overlap_seconds) == (500, 10000, 30)
    assert inc.safety_lag_seconds == 5
    chg = s.tables["change_request"]
    assert (chg.name, chg.timestamp_field) == ("change_request", "sys_created_on")
    assert chg.query_category == "replica"
    # The alias had to change; the topic the Java connector wrote to did not.
    assert chg.topic == "sn.Change-Request"
    assert s.topic_prefix == "sn."


def test_secrets_are_copied_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _import(tmp_path, capsys, JAVA, "--include-secrets")
    assert code == 0
    s = _load(tmp_path, out, {})
    assert s.snow.auth.password is not None
    assert s.snow.auth.password.get_secret_value() == "s3cret-Pa55"


def test_java_properties_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "connector.properties"
    source.write_text(
        "# a standalone worker's connector file\n"
        "name=legacy\n"
        "snow.url=https://acme.service-now.com\n"
        "snow.auth.username: integration.user\n"
        "snow.tables=incident\n"
        "snow.table.incident.name=incident\n"
        "snow.table.incident.query=active=true^\\\n"
        "  priority<=2\n",
        encoding="utf-8",
    )
    assert main(["config", "import", str(source)]) == 0
    s = _load(tmp_path, capsys.readouterr().out, PASSWORD_ENV)
    assert s.name == "legacy"
    assert s.tables["incident"].query == "active=true^priority<=2"


def test_confluent_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _import(tmp_path, capsys, CONFLUENT)
    assert (code, err) == (0, "")
    assert "s3cret-Pa55" not in out
    assert "LICENSE-KEY-123" not in out  # an unmapped secret is named, never echoed
    assert "#   confluent.license = <secret>" in out
    for key in (
        "connector.class",
        "confluent.topic.bootstrap.servers",
        "servicenow.ssl.truststore",
    ):
        assert f"#   {key}" in out, key
    s = _load(tmp_path, out, PASSWORD_ENV)
    assert (s.name, s.tasks_max) == ("ServiceNowSourceConnector", 1)
    assert s.snow.auth.username == "integration.user"
    inc = s.tables["incident"]
    assert (inc.name, inc.topic, inc.start_timestamp) == (
        "incident",
        "sn-incidents",
        "2024-03-01 00:00:00",
    )
    assert (inc.batch_size, inc.poll_interval_ms) == (200, 15000)
    # Wrapped form and the servicenow.username spelling give the same result.
    flat = {k: v for k, v in CONFLUENT.items() if k not in ("name", "servicenow.user")}
    wrapped = {
        "name": CONFLUENT["name"],
        "config": {**flat, "servicenow.username": "integration.user"},
    }
    code, again, _ = _import(tmp_path, capsys, wrapped)
    assert code == 0
    assert again == out.replace("servicenow.user =", "servicenow.username =")


def test_values_that_cannot_be_mapped_are_commented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {
        **CONFLUENT,
        "tasks.max": "two",
        "servicenow.since": "03/01/2024",
        "kafka.topic": "${file:/etc/kafka/topics.properties:incident}",
    }
    code, out, _ = _import(tmp_path, capsys, document)
    assert code == 0
    assert "#   tasks.max = two  ('two' is not a whole number)" in out
    assert "#   servicenow.since = 03/01/2024  ('03/01/2024' is not a yyyy-MM-dd date)" in out
    assert "#   kafka.topic = ${file:" in out
    s = _load(tmp_path, out, PASSWORD_ENV)
    assert s.tasks_max == 1
    assert s.tables["incident"].start_timestamp == "1970-01-01 00:00:00"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b'{"snow.url": ', "not valid JSON"),
        (b"[1, 2, 3]", "expected a JSON object"),
        (b'{"connector.class": "x", "topics": "t"}', "no snow.* (Java ServiceNow connector)"),
        (b'{"snow.url": "https://a", "servicenow.url": "https://a"}', "mixes snow.*"),
        (b"just some words\n", "line 1 is not key=value"),
        (b'{"name": "x", "config": {"snow.url": "u"}, "extra": 1}', "only name and config"),
    ],
)
def test_a_file_that_is_no_connector_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str
) -> None:
    source = tmp_path / "garbage.json"
    source.write_bytes(content)
    assert main(["config", "import", str(source)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(source) in captured.err
    assert reason in captured.err
    assert "Java ServiceNow source connector" in captured.err


def test_missing_file_and_usage_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "import", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["config"]) == 2
    assert main(["config", "import"]) == 2


_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda v: v.strip() == v and not v.startswith("${"))


@given(query=_VALUE, topic=_VALUE, category=_VALUE)
def test_any_text_value_survives_the_yaml(query: str, topic: str, category: str) -> None:
    # Queries carry ^, =, :, # and quotes: the YAML must give back exactly what was imported.
    config = {
        "snow.url": "https://acme.service-now.com",
        "snow.tables": "incident",
        "snow.table.incident.name": "incident",
        "snow.table.incident.query": query,
        "snow.table.incident.topic": topic,
        "snow.table.incident.query.category": category,
    }
    imported = import_connector(config)
    loaded = yaml.safe_load(render_yaml(imported, config, "x.json"))
    assert loaded["snow"]["tables"]["incident"] == {
        "name": "incident",
        "query": query,
        "topic": topic,
        "query.category": category,
    }


def test_every_omitted_secret_names_a_variable_that_sets_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {
        "snow.url": "https://acme.service-now.com",
        "snow.auth.type": "OAUTH2",
        "snow.auth.oauth.client.id": "client",
        "snow.auth.oauth.client.secret": "client-secret-value",
        "snow.auth.oauth.token.url": "https://acme.service-now.com/oauth_token.do",
        "snow.tables": "incident",
        "snow.table.incident.name": "incident",
    }
    code, out, _ = _import(tmp_path, capsys, document)
    assert code == 0
    assert "client-secret-value" not in out
    named = re.findall(r"set (SNOWSOURCE_[A-Z_]+)", out)
    assert named == ["SNOWSOURCE_SNOW__AUTH__OAUTH_CLIENT_SECRET"]
    s = _load(tmp_path, out, dict.fromkeys(named, "from-env"))
    assert s.snow.auth.oauth_client_secret is not None
    assert s.snow.auth.oauth_client_secret.get_secret_value() == "from-env"
    assert s.snow.auth.oauth_token_url == document["snow.auth.oauth.token.url"]


def test_replace_field_and_mask_field_become_governance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        **JAVA["config"],
        "transforms": "drop,keep,mask,route,maybe",
        "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.drop.exclude": "u_ssn, caller_id.email,sys_mod_count",
        "transforms.drop.blacklist": "u_pin",
        "transforms.drop.renames": "number:ticket",
        "transforms.keep.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.keep.whitelist": "number,short_description,caller_id,sys_updated_on",
        "transforms.mask.type": "org.apache.kafka.connect.transforms.MaskField$Value",
        "transforms.mask.fields": "phone,email",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.maybe.type": "org.apache.kafka.connect.transforms.MaskField$Value",
        "transforms.maybe.fields": "description",
        "transforms.maybe.predicate": "isIncident",
        "transforms.orphan.type": "org.apache.kafka.connect.transforms.Flatten$Value",
    }
    code, out, err = _import(tmp_path, capsys, {"name": "x", "config": config})
    assert (code, err) == (0, "")
    comments = [line for line in out.splitlines() if line.startswith("#")]
    for key in (
        "transforms",
        "transforms.drop.renames",
        "transforms.route.type",
        "transforms.route.regex",
        "transforms.maybe.predicate",
        "transforms.maybe.fields",
        "transforms.orphan.type",
    ):
        assert any(f"#   {key} = " in line for line in comments), key
    transforms_line = next(line for line in comments if line.startswith("#   transforms = "))
    assert "route, maybe" in transforms_line
    assert any("sys_mod_count left out" in line for line in comments)
    s = _load(tmp_path, out, PASSWORD_ENV)
    assert s.fields_exclude == ["u_ssn", "caller_id.email", "u_pin"]
    assert s.fields_mask == ["phone", "email"]
    assert s.tables["incident"].fields_mask == ["phone", "email"]
    # Its own projection narrowed to the whitelist; the other table takes the whitelist.
    assert s.tables["incident"].fields == ["number", "short_description"]
    assert s.tables["change_request"].fields == [
        "number",
        "short_description",
        "caller_id",
        "sys_updated_on",
    ]
