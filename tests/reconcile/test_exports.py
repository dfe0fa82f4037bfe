import virtplane.reconcile as reconcile


def test_every_exported_name_exists() -> None:
    for name in reconcile.__all__:
        assert hasattr(reconcile, name), name


def test_exported_members() -> None:
    assert set(reconcile.__all__) >= {
        "Clock",
        "Controller",
        "ControllerMetrics",
        "FakeClock",
        "ItemBackoff",
        "MonotonicClock",
        "QueueShutDown",
        "Reconciler",
        "Request",
        "Result",
        "TerminalError",
        "WorkQueue",
        "resync_ticker",
    }
