"""The outside world: the ServiceNow Table API client and the Kafka clients (sink, offsets store,
group membership). Adapters depend on ``core`` and ``runtime`` only."""
