"""Reading a table's columns through the Table API, against the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from snowsource.adapters.servicenow import BasicAuth, ServiceNowClient
from snowsource.core.errors import TableError, TableFailedError
from snowsource.core.typed import convert_row
from snowsource.emulator import Emulator, serve
from snowsource.engine.dictionary_reader import read_columns


@pytest.fixture
def emu() -> Emulator:
    emulator = Emulator(seed=3, now=datetime(2026, 9, 29, 7, 0, 0, tzinfo=UTC))
    emulator.seed(("incident", "cmdb_ci"), rows=20)
    return emulator


@pytest.fixture
async def client(emu: Emulator) -> AsyncIterator[ServiceNowClient]:
    async with (
        serve(emu) as url,
        ServiceNowClient(url, BasicAuth("admin", SecretStr("admin"))) as c,
    ):
        yield c


@pytest.mark.parametrize("page_size", [1000, 7])
async def test_columns_include_inherited_ones(
    emu: Emulator, client: ServiceNowClient, page_size: int
) -> None:
    cols = await read_columns(client, "incident", page_size=page_size)
    row = emu.rows("incident")[0]
    assert set(cols) == set(row)
    assert (cols["number"], cols["priority"], cols["caller_id"]) == (
        "string",
        "integer",
        "reference",
    )
    assert convert_row(row, cols).unparsed == ()
    server = await read_columns(client, "cmdb_ci_server", page_size=page_size)
    assert server["disk_space"] == "float"
    assert server["purchase_date"] == "glide_date"


async def test_403_names_the_access_typed_records_need(
    emu: Emulator, client: ServiceNowClient
) -> None:
    emu.deny_table("admin", "sys_dictionary")
    with pytest.raises(
        TableError, match="typed records need read access to sys_dictionary"
    ) as info:
        await read_columns(client, "incident")
    assert info.value.status == 403


async def test_unknown_table_fails_naming_it(client: ServiceNowClient) -> None:
    with pytest.raises(TableFailedError, match="'u_nothing' has no sys_db_object row"):
        await read_columns(client, "u_nothing")


async def test_a_dictionary_page_too_expensive_is_asked_again_at_half_the_size(
    emu: Emulator, client: ServiceNowClient
) -> None:
    expected = await read_columns(client, "incident")
    emu.journal.clear()
    # Five fields a row: a page of more than 6 rows is over the instance's quota.
    emu.max_page_cost = 30
    assert await read_columns(client, "incident") == expected
    limits = [int(r.params["sysparm_limit"]) for r in emu.journal if r.table == "sys_dictionary"]
    assert limits[:4] == [1000, 500, 250, 125]
    assert limits[-1] <= 6


async def test_the_sensitive_columns_of_sys_user(client: ServiceNowClient) -> None:
    cols = await read_columns(client, "sys_user")
    assert cols["user_password"] == "password2"
    assert cols["u_recovery_code"] == "glide_encrypted"
