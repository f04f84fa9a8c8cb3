"""The lean Redis client (RESP over asyncio connections) that the stores and the caches share."""
