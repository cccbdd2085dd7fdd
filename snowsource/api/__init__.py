"""The Kafka Connect-compatible REST API; it talks to the engine through a small protocol."""
