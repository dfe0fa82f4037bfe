"""The REST API (FastAPI): thin; it validates input, writes spec, and never calls a driver."""
