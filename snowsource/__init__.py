"""snowsource: stream ServiceNow tables into Apache Kafka with Connect-compatible offsets."""

__version__ = "0.1.0"
