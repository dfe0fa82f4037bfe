"""The running control plane: cache, host connections, controllers, wired by bootstrap."""
