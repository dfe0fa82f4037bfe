"""Level-triggered reconcilers: each reads the stored object and what the host reports, takes one step, writes."""
