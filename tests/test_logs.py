from __future__ import annotations

import json
import logging

from virtplane.logs import JsonFormatter


def test_json_lines_carry_the_extra_fields() -> None:
    record = logging.LogRecord(
        "virtplane.reconcile", logging.ERROR, __file__, 1, "reconcile of %s failed", ("vm/a",), None
    )
    record.controller = "VirtualMachine"
    record.request_name = "a"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "reconcile of vm/a failed"
    assert line["level"] == "error" and line["logger"] == "virtplane.reconcile"
    assert line["controller"] == "VirtualMachine" and line["request_name"] == "a"
    assert "args" not in line and "msg" not in line
