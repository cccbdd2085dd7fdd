"""asyncio building blocks shared by adapters and engine: resources, deadlines, stop-aware waits."""
