"""The pure core: cursor, query, offsets bytes, commit tracking, dedup, assignment, retry policy.

Plain functions and frozen value objects, no I/O: nothing here imports asyncio, aiohttp or
aiokafka (``tests/unit/test_layout.py`` enforces it), so every rule is tested on its own.
"""
