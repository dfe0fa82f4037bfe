"""The `virtplane` command line: a thin HTTP client of the virtplane server."""
