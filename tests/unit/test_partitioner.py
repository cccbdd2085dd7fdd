"""Kafka's murmur2 partitioner: the Java client's vectors, the shared vectors and aiokafka agree."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from snowsource.core import partitioner
from snowsource.core.partitioner import murmur2, murmur2_reference, partition_for_key
from tests.vectors import vector

# org.apache.kafka.common.utils.UtilsTest#testMurmur2: Java's signed results.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]
OFFSET_KEYS = vector("offset_keys.json")["cases"]


def test_the_compiled_hash_is_in_use() -> None:
    # The package is a dependency with wheels for the platforms we ship; falling back to the
    # Python transcription silently would cost ~5 µs per produced record.
    assert partitioner.murmur2 is not murmur2_reference


@pytest.mark.parametrize(("data", "java"), JAVA_VECTORS)
def test_java_vectors(data: bytes, java: int) -> None:
    assert murmur2(data) == java & 0xFFFFFFFF
    assert murmur2_reference(data) == java & 0xFFFFFFFF


@pytest.mark.parametrize("case", OFFSET_KEYS, ids=lambda c: str(c["table"]))
def test_shared_vectors_partition_of_25(case: dict[str, Any]) -> None:
    assert partition_for_key(case["key_utf8"].encode(), 25) == case["kafka_partition_of_25"]


@given(data=st.binary(max_size=300), partitions=st.integers(1, 200))
def test_agrees_with_aiokafka_and_the_reference(data: bytes, partitions: int) -> None:
    assert murmur2(data) == murmur2_reference(data) == aiokafka_murmur2(data) & 0xFFFFFFFF
    all_partitions = list(range(partitions))
    expected = DefaultPartitioner()(data, all_partitions, all_partitions)
    assert partition_for_key(data, partitions) == expected


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_partitions must be >= 1"):
        partition_for_key(b"k", 0)
