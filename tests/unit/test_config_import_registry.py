"""``config import``: Confluent's Avro / JSON Schema output maps to value.format and
schema.registry (SPEC §15.1)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from snowsource.cli.main import main
from snowsource.config.fields import ValueFormat
from snowsource.config.loader import load_config
from snowsource.config.registry import RegistryAuthType
from tests.unit.test_config_import import CONFLUENT, JAVA, PASSWORD_ENV

REGISTRY_ENV = {**PASSWORD_ENV, "SNOWSOURCE_SCHEMA_REGISTRY__PASSWORD": "sr-secret-from-env"}


def _imported(tmp_path: Path, capsys: pytest.CaptureFixture[str], document: object) -> str:
    source = tmp_path / "connector.json"
    source.write_bytes(orjson.dumps(document))
    assert main(["config", "import", str(source)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("data_format", "expected"), [("AVRO", "avro"), ("JSON_SR", "json_schema")]
)
def test_confluent_output_data_format_and_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data_format: str, expected: str
) -> None:
    document = {
        **CONFLUENT,
        "output.data.format": data_format,
        "value.converter.schema.registry.url": "https://sr.example.com:8081,https://sr2:8081",
        "value.converter.basic.auth.credentials.source": "USER_INFO",
        "value.converter.basic.auth.user.info": "SRKEY:sr-Pa55-word",
    }
    out = _imported(tmp_path, capsys, document)
    assert "sr-Pa55-word" not in out  # the registry secret is never printed
    target = tmp_path / "imported.yaml"
    target.write_text(out)
    settings = load_config(target, env=REGISTRY_ENV).settings
    assert settings.value_format is ValueFormat(expected)
    registry = settings.schema_registry
    assert registry.url == "https://sr.example.com:8081"
    assert (registry.auth_type, registry.username) == (RegistryAuthType.BASIC, "SRKEY")
    assert registry.password is not None
    assert registry.password.get_secret_value() == "sr-secret-from-env"


def test_java_connector_with_an_avro_converter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flat = {k: v for k, v in JAVA["config"].items() if not k.endswith(".display.value")}
    document = {
        **flat,
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": "http://registry:8081",
    }
    out = _imported(tmp_path, capsys, document)
    assert "#   value.converter " not in out  # mapped, not commented
    target = tmp_path / "imported.yaml"
    target.write_text(out)
    settings = load_config(target, env=PASSWORD_ENV).settings
    assert settings.value_format is ValueFormat.AVRO
    assert settings.schema_registry.url == "http://registry:8081"


@pytest.mark.parametrize(
    "converter",
    ["io.confluent.connect.avro.AvroConverter", "io.confluent.connect.json.JsonSchemaConverter"],
)
def test_display_values_with_a_schema_are_left_out_so_the_file_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], converter: str
) -> None:
    """The Java connector's ``display.value: all`` with a registry converter: records with a
    schema carry raw values, so the import leaves it out and says so (it would not load)."""
    assert any(k.endswith(".display.value") and v == "all" for k, v in JAVA["config"].items())
    document = {
        **JAVA["config"],
        "value.converter": converter,
        "value.converter.schema.registry.url": "http://registry:8081",
    }
    out = _imported(tmp_path, capsys, document)
    assert "display.value all left out" in out
    target = tmp_path / "imported.yaml"
    target.write_text(out)
    settings = load_config(target, env=PASSWORD_ENV).settings
    assert settings.value_format in (ValueFormat.AVRO, ValueFormat.JSON_SCHEMA)
    assert all(table.display_value != "all" for table in settings.snow.tables.values())


def test_a_malformed_user_info_is_commented_without_its_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {**CONFLUENT, "schema.registry.basic.auth.user.info": "no-colon-secret"}
    out = _imported(tmp_path, capsys, document)
    assert "no-colon-secret" not in out
    assert "schema.registry.basic.auth.user.info = <secret>  (expected user:password)" in out
