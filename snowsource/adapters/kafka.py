"""Kafka connection settings and the admin operations snowsource needs (topics, configs).

The only module that turns our configuration into aiokafka keyword arguments, so data producer,
offsets store, admin client and group membership all connect the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.conn import create_conn
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    NotControllerError,
    RequestTimedOutError,
    SaslAuthenticationFailed,
    TopicAlreadyExistsError,
    UnsupportedSaslMechanismError,
    for_code,
)
from aiokafka.helpers import create_ssl_context

from snowsource.core.errors import SnowsourceError
from snowsource.core.retry import RetryPolicy
from snowsource.observability.redact import redact
from snowsource.runtime.deadline import Deadline
from snowsource.runtime.retrying import Attempt, DeadlineExceededError, retrying

log = structlog.get_logger(__name__)

#: How long closing a Kafka client may take before we give up on it (outages must not hang
#: shutdown).
CLOSE_TIMEOUT_SECONDS = 10.0


def is_retriable(exc: BaseException) -> bool:
    """True when the same request may succeed later (after a backoff): aiokafka's ``retriable``
    flag, plus its client-side timeout, which is how an unreachable broker shows up."""
    if isinstance(exc, KafkaTimeoutError | TimeoutError):
        return True
    return isinstance(exc, KafkaError) and bool(exc.retriable)


async def stop_client(client: Any, what: str, deadline: Deadline | None) -> None:
    """``client.stop()`` within ``deadline`` (and ``CLOSE_TIMEOUT_SECONDS``): during an outage
    aiokafka would otherwise wait for its request timeout."""
    seconds = (deadline or Deadline.never()).remaining(CLOSE_TIMEOUT_SECONDS)
    if not await close_fully(client, within=seconds):
        log.warning(f"{what} did not close in time; abandoning it")


async def close_fully(client: Any, *, within: float = CLOSE_TIMEOUT_SECONDS) -> bool:
    """Stop an aiokafka client (``stop()``, or ``close()`` for an admin client) within
    ``within`` seconds, even when this task is cancelled meanwhile (the cancel is raised once
    the stop ended). False when the stop did not finish in time.

    aiokafka closes its connections last: a stop cut short by a cancel (a poller cancelled at
    the shutdown deadline while it closes a consumer) would leave their sockets open, reported
    as unclosed when the client is collected. So the stop runs in a task of its own that a
    cancel of the caller does not interrupt, and a stop that cannot finish in time is cancelled
    and its connections closed here, synchronously.
    """
    limit = Deadline.after(within)
    stop = client.close if isinstance(client, AIOKafkaAdminClient) else client.stop
    closing = asyncio.ensure_future(stop())
    try:
        await asyncio.wait({closing}, timeout=limit.remaining())
    except asyncio.CancelledError:
        await asyncio.wait({closing}, timeout=limit.remaining())
        if await _ended(closing, client) and not closing.cancelled():
            closing.exception()  # retrieved: the cancel is what this task raises
        raise
    if not await _ended(closing, client):
        return False
    closing.result()  # the stop's own error, if it raised one
    return True


#: How long a start a cancel arrived in may still take: a healthy broker answers a bootstrap's
#: metadata request in milliseconds; one that does not is left to its own timeout.
START_ON_CANCEL_SECONDS = 1.0


async def start_fully(client: Any, *, within: float = START_ON_CANCEL_SECONDS) -> None:
    """``client.start()``, which a cancel of this task does not interrupt: the cancel is
    raised once the start ended (or ``within`` seconds after the cancel). aiokafka's bootstrap
    drops the connection it is asking when cancelled mid-request, never closing it; the
    caller's ``close_fully`` closes everything a finished start opened."""
    starting = asyncio.ensure_future(client.start())
    try:
        await asyncio.shield(starting)
    except asyncio.CancelledError:
        await asyncio.wait({starting}, timeout=within)
        if not starting.done():
            starting.cancel()
        elif not starting.cancelled():
            starting.exception()  # retrieved: the cancel is what this task raises
        raise


async def _ended(closing: asyncio.Future[Any], client: Any) -> bool:
    """Whether ``closing`` finished; if not, it is cancelled and the client's sockets closed."""
    if closing.done():
        return True
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    inner = getattr(client, "client", None) or getattr(client, "_client", None)
    for conn in list(getattr(inner, "_conns", {}).values()):
        conn.close()
    return False


class KafkaUnavailableError(SnowsourceError):
    """Kafka could not be reached within the start-up timeout (exit 1)."""


class KafkaSecurityError(KafkaUnavailableError):
    """Kafka refused who we are or we refused the broker (SASL, TLS): retrying cannot help, so
    start-up ends at once (exit 1) with the named cause instead of "could not be reached"."""


#: How long the direct probe that names an authentication/TLS failure may take.
SECURITY_PROBE_SECONDS = 5.0


class TopicConfigError(SnowsourceError):
    """A topic exists with settings snowsource cannot use (e.g. offsets topic not compacted)."""


@dataclass(frozen=True)
class KafkaConnection:
    """How to reach the cluster; secrets are plain strings only inside this object."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    client_id: str = "snowsource"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by every aiokafka client we create."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
            "client_id": self.client_id,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        if self.security_protocol.startswith("SASL"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism or "PLAIN"
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs

    @property
    def uses_security(self) -> bool:
        """Whether a connection can fail for authentication or TLS reasons."""
        return self.security_protocol != "PLAINTEXT"


def _bootstrap_hosts(conn: KafkaConnection) -> list[tuple[str, int]]:
    hosts: list[tuple[str, int]] = []
    for item in conn.bootstrap_servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            hosts.append((host.strip("[]"), int(port)))
    return hosts


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def security_problem(
    conn: KafkaConnection, host: str, port: int, exc: BaseException
) -> KafkaSecurityError | None:
    """The named authentication/TLS failure behind ``exc``, or None when it is not one."""
    where = f"{host}:{port}"
    mechanism = conn.sasl_mechanism or "PLAIN"
    for cause in _chain(exc):
        if isinstance(cause, SaslAuthenticationFailed | IllegalSaslStateError):
            said = str(cause).strip()
            return KafkaSecurityError(
                redact(
                    f"Kafka authentication failed for user {conn.sasl_username!r} with "
                    f"{mechanism} at {where}{f' ({said})' if said else ''}; check "
                    f"kafka.sasl.username, kafka.sasl.password and kafka.sasl.mechanism"
                )
            )
        if isinstance(cause, UnsupportedSaslMechanismError):
            return KafkaSecurityError(
                redact(f"Kafka at {where} does not accept SASL mechanism {mechanism}: {cause}")
            )
        if isinstance(cause, ssl.SSLCertVerificationError):
            verify = str(cause.verify_message or cause.reason).rstrip(".")
            return KafkaSecurityError(
                f"TLS certificate verify failed for {where}: {verify}; set "
                f"kafka.ssl.cafile to the CA that signed the broker's certificate and use a "
                f"bootstrap host name the certificate names"
            )
        if isinstance(cause, ssl.SSLError):
            return KafkaSecurityError(
                f"TLS handshake with Kafka at {where} failed: {cause.reason or cause}; check "
                f"kafka.security.protocol, and for a listener that requires client "
                f"certificates (mTLS) kafka.ssl.certfile and kafka.ssl.keyfile"
            )
    return None


async def diagnose_security(conn: KafkaConnection) -> KafkaSecurityError | None:
    """Connect to each bootstrap broker directly and name an authentication/TLS refusal.

    aiokafka's bootstrap only logs why a broker refused and then says it could not bootstrap;
    one direct connection brings the cause back. None when no broker refused for such a reason
    (unreachable, or it worked).
    """
    kwargs = conn.client_kwargs()
    kwargs.pop("bootstrap_servers")
    for host, port in _bootstrap_hosts(conn):
        try:
            async with asyncio.timeout(SECURITY_PROBE_SECONDS):
                probe = await create_conn(
                    host, port, request_timeout_ms=int(SECURITY_PROBE_SECONDS * 1000), **kwargs
                )
        except (KafkaError, OSError, TimeoutError) as exc:
            problem = security_problem(conn, host, port, exc)
            if problem is not None:
                return problem
            continue
        probe.close()
        return None
    return None


#: A broker we cannot reach answers with one of these: the request goes to another broker.
_NODE_DOWN = (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError)


class LiveNodeAdmin(AIOKafkaAdminClient):  # type: ignore[misc]  # aiokafka is untyped
    """An admin client that sends what any broker can answer to a broker that is up.

    aiokafka's admin client sends such requests (metadata, configs, coordinator lookups) to a
    broker drawn at random from the last metadata, and controller requests to the node that
    metadata names: on a cluster with one broker down (killed, restarting, not yet fenced by
    the controller) a start-up then fails at once with ``NodeNotReadyError`` although two
    brokers could answer. Here a request for no broker in particular tries the brokers in
    random order until one answers, and a controller request refreshes the metadata and tries
    again (a killed node stays "controller" in metadata until it is fenced), both within the
    client's request timeout.
    """

    async def live_node(self) -> int:
        """The id of a broker that accepts a connection now (metadata refreshed when none)."""
        nodes = [broker.nodeId for broker in self._client.cluster.brokers()]
        random.shuffle(nodes)
        for node in nodes:
            if await self._client.ready(node):
                return int(node)
        await self._client.force_metadata_update()
        raise NodeNotReadyError(f"none of the brokers {sorted(nodes)} accepts a connection")

    async def _send_request(self, request: Any, node_id: int | None = None) -> Any:
        if node_id is not None:
            return await self._client.send(node_id, request)
        return await self._patiently(lambda node: self._client.send(node, request), None)

    async def _send_to_controller(self, request: Any) -> Any:
        return await self._patiently(
            lambda node: self._client.send(node, request), self._controller
        )

    async def _controller(self) -> int:
        controller = self._client.cluster.controller
        if controller is None or not await self._client.ready(controller.nodeId):
            await self._client.force_metadata_update()
            raise NodeNotReadyError("the controller named by metadata is not reachable")
        return int(controller.nodeId)

    async def _patiently(self, send: Any, pick: Any) -> Any:
        """``send(node)`` to the node ``pick()`` (default: any live one) returns, again with a
        fresh pick after a backoff while nodes are down, within the request timeout."""
        timeout = self._client._request_timeout_ms / 1000
        deadline = Deadline.after(timeout)
        while True:
            try:
                node = await (pick or self.live_node)()
                return await send(node)
            except (*_NODE_DOWN, NotControllerError):
                if deadline.remaining() <= self._client._retry_backoff:
                    raise
                await self._client.force_metadata_update()
                await asyncio.sleep(self._client._retry_backoff)


@contextlib.asynccontextmanager
async def admin_client(conn: KafkaConnection) -> AsyncIterator[AIOKafkaAdminClient]:
    """An admin client that is always closed."""
    admin = LiveNodeAdmin(**conn.client_kwargs())
    try:
        await start_fully(admin)
        yield admin
    finally:
        await close_fully(admin)


# Start-up probing: quick at first, then every few seconds (full jitter) until the timeout.
_STARTUP_RETRY = RetryPolicy(0.25, 5.0)


async def wait_for_kafka(conn: KafkaConnection, within: float) -> None:
    """Return once the cluster answers a metadata request; raise after ``within`` seconds.

    An authentication or TLS refusal raises ``KafkaSecurityError`` at once: waiting for the
    whole start-up timeout would only repeat it.
    """
    deadline = Deadline.after(within)

    def warn(attempt: Attempt, delay: float) -> None:
        log.warning(
            "kafka not reachable yet, retrying", error=repr(attempt.error), retry_in=round(delay, 2)
        )

    try:
        async for attempt in retrying(
            _STARTUP_RETRY,
            None,
            deadline,
            retry_if=lambda exc: isinstance(exc, KafkaError | OSError | TimeoutError),
            on_retry=warn,
        ):
            with attempt:
                try:
                    async with deadline.limit(), admin_client(conn) as admin:
                        await admin.describe_cluster()
                except (KafkaError, OSError, TimeoutError):
                    # aiokafka only says it could not bootstrap; a direct connection names a
                    # refusal (authentication, TLS), which no retry can cure.
                    if conn.uses_security and (problem := await diagnose_security(conn)):
                        raise problem from None
                    raise
    except DeadlineExceededError as exc:
        raise KafkaUnavailableError(
            f"Kafka at {conn.bootstrap_servers} could not be reached within {within:g}s "
            f"(kafka.startup.timeout.seconds): {redact(repr(exc.__cause__))}"
        ) from None


def _check_error(code: int, what: str) -> None:
    if code:
        raise for_code(code)(what)


async def describe_topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    """The effective configuration of one topic."""
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    for response in responses:
        for resource in response.resources:
            error_code, _message, _type, name, entries = resource[:5]
            if name != topic:
                continue
            _check_error(error_code, f"describe configs of {topic}")
            return {entry[0]: entry[1] for entry in entries}
    raise TopicConfigError(f"no configuration returned for topic {topic}")


async def broker_defaults(admin: AIOKafkaAdminClient) -> tuple[int, int]:
    """The broker's ``num.partitions`` and ``default.replication.factor``.

    aiokafka speaks CreateTopics v3 at most, which cannot ask for "broker default" (-1), so we
    resolve the defaults ourselves.
    """
    if isinstance(admin, LiveNodeAdmin):
        # A broker's own configuration is answered by that broker only: ask one that is up.
        node_id = str(await admin.live_node())
    else:
        cluster = await admin.describe_cluster()
        brokers = cluster.get("brokers") or []
        node_id = str(brokers[0]["node_id"]) if brokers else "1"
    # Only the two keys: a broker's whole configuration is hundreds of entries to decode.
    wanted = {"num.partitions": None, "default.replication.factor": None}
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, node_id, configs=wanted)]
    )
    values: dict[str, str] = {}
    for response in responses:
        for resource in response.resources:
            values.update({entry[0]: entry[1] for entry in resource[4]})
    return int(values.get("num.partitions", "1")), int(
        values.get("default.replication.factor", "1")
    )


def committed_reader(conn: KafkaConnection) -> AIOKafkaConsumer:
    """A consumer outside any group, for partitions it is assigned: it reads what transactions
    committed (an aborted one never shows, an open one is waited for), from the earliest
    record the broker still holds. Not started."""
    return AIOKafkaConsumer(
        **conn.client_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )


async def high_watermarks(
    conn: KafkaConnection, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """Each partition's high watermark: the offset after its last record, committed or not.

    A ``read_committed`` consumer's ``end_offsets`` stop at the last stable offset, the first
    record of the oldest transaction still open there, which may be another producer's (another
    table's, the delete stream's on the same topic, a killed process's until the broker times
    it out). A reader that must see everything committed before it began reads up to this
    instead, waiting while such a transaction is open.
    """
    consumer = AIOKafkaConsumer(
        **conn.client_kwargs(), group_id=None, isolation_level="read_uncommitted"
    )
    try:
        await start_fully(consumer)
        return dict(await consumer.end_offsets(partitions))
    finally:
        await close_fully(consumer)


async def existing_topics(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition counts of those of ``topics`` that exist."""
    found: dict[str, int] = {}
    for entry in await admin.describe_topics(topics):
        if entry["error_code"] == 0:
            found[entry["topic"]] = len(entry["partitions"])
    return found


async def create_topic(
    admin: AIOKafkaAdminClient,
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> bool:
    """Create a topic (``-1`` = broker default). False when it already existed."""
    outcome = await create_topics(
        admin, [name], partitions=partitions, replication_factor=replication_factor, configs=configs
    )
    result = outcome[name]
    if isinstance(result, KafkaError):
        raise result
    return result


async def create_topics(
    admin: AIOKafkaAdminClient,
    names: list[str],
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> dict[str, bool | KafkaError]:
    """Create topics in one request (``-1`` = broker default): fifty tables' topics cost one
    round trip, not fifty. Per name: True when created, False when it already existed, or the
    error the broker answered for it."""
    if partitions == -1 or replication_factor == -1:
        default_partitions, default_rf = await broker_defaults(admin)
        partitions = default_partitions if partitions == -1 else partitions
        replication_factor = default_rf if replication_factor == -1 else replication_factor
    response = await admin.create_topics(
        [
            NewTopic(name, partitions, replication_factor, topic_configs=dict(configs or {}))
            for name in names
        ]
    )
    outcome: dict[str, bool | KafkaError] = {}
    for topic_name, error_code, *_rest in response.topic_errors:
        if error_code == 0:
            outcome[topic_name] = True
            log.info(
                "created topic",
                topic=topic_name,
                partitions=partitions,
                replication=replication_factor,
            )
        elif for_code(error_code) is TopicAlreadyExistsError:
            outcome[topic_name] = False
        else:
            outcome[topic_name] = for_code(error_code)(f"create topic {topic_name}")
    for name in names:
        outcome.setdefault(name, KafkaError(f"create topic {name}: no answer for it"))
    return outcome
