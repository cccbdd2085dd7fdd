"""The transactional id of a table's producer (exactly-once).

It is derived from the table's canonical offsets key, the bytes the offsets topic's key has, so
it follows the table wherever it runs: two processes that both believe they own a table use the
same id, and Kafka fences the older one. The alias and the process play no part.
"""

from __future__ import annotations

import hashlib

from snowsource.core.offsets_codec import SourcePartition, encode_key

#: Hex digits of the key's SHA-256 kept in the id: 80 bits, ample for the tables of a cluster.
DIGEST_CHARS = 20


def transactional_id(connector: str, partition: SourcePartition) -> str:
    """``snowsource-<connector>-`` + the first 20 hex digits of SHA-256 over the offsets key."""
    digest = hashlib.sha256(encode_key(connector, partition)).hexdigest()
    return f"snowsource-{connector}-{digest[:DIGEST_CHARS]}"
