"""The apiVersion of every manifest, in a module of its own: the CLI needs it without importing
the models (0.36 s of a command's start-up, issue 39)."""

API_VERSION = "virtplane.io/v1"
