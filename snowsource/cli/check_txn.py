"""``check``'s exactly-once line: the broker lets this principal use transactions.

The probe starts a transactional producer under an id of its own (``snowsource-<name>-check``,
never a table's: a table's id would fence the running daemon) and stops it. That start is an
InitProducerId, which the transaction coordinator records in ``__transaction_state``: the one
thing ``check`` makes the cluster write, and only with ``exactly.once: true``.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, TransactionalIdAuthorizationFailed

from snowsource.adapters.kafka import KafkaConnection
from snowsource.adapters.txn_producer import TRANSACTION_TIMEOUT_MS
from snowsource.cli.check_report import CheckResult, Status
from snowsource.config.models import Settings

NAME = "exactly-once: broker allows transactions"


def check_id(settings: Settings) -> str:
    """The transactional id the probe uses: the connector's prefix, no table's id."""
    return f"snowsource-{settings.name}-check"


async def transactions_check(
    settings: Settings, conn: KafkaConnection, within: float
) -> CheckResult:
    """PASS when a transactional producer starts within ``within`` seconds."""
    txn_id = check_id(settings)
    producer = AIOKafkaProducer(
        **conn.client_kwargs(),
        transactional_id=txn_id,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
    )
    try:
        async with asyncio.timeout(within):
            await producer.start()
    except TransactionalIdAuthorizationFailed:
        return CheckResult(
            NAME,
            Status.FAIL,
            f"the broker refused transactional.id {txn_id!r}",
            (
                "grant this principal Write and Describe on TransactionalId prefix "
                f"'snowsource-{settings.name}-' and IdempotentWrite on the cluster, "
                "or set exactly.once: false",
            ),
        )
    except (KafkaError, OSError, TimeoutError) as exc:
        return CheckResult(
            NAME,
            Status.FAIL,
            f"no transactional producer could start within {within:g} s ({exc!r})",
            (
                "the transaction coordinator needs the __transaction_state topic: on a "
                "cluster with fewer brokers than transaction.state.log.replication.factor "
                "(default 3) or transaction.state.log.min.isr it never becomes available",
            ),
        )
    finally:
        await producer.stop()
    return CheckResult(
        NAME,
        Status.PASS,
        f"exactly.once is on: a transactional producer started ({txn_id}); consumers of the "
        f"output topics must set isolation.level=read_committed",
    )
