"""What a running job shows: a live bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import io
import logging

from plume.harness.training.progress import Progress, format_clock


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal_and_a_bar_on_one(caplog):
    with caplog.at_level(logging.INFO, logger="plume"):
        plain = Progress(1000, 0, every_s=0.0, score_unit="QoE", stream=io.StringIO())
        assert plain.bar is None
        assert plain.training(500, train_return=1.5)  # every_s=0: a line each time
        plain.evaluated(1200, {"majority_slow": 4.25})  # past the budget: never a negative ETA
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("[train]  50.0% 500/1,000 steps") and "train return 1.50" in lines[0]
    assert "100.0% 1,200/1,000" in lines[1] and "eta 0:00:00" in lines[1]
    assert lines[1].endswith("test QoE majority_slow=4.250")

    screen = _Terminal()
    live = Progress(1000, 200, every_s=60.0, score_unit="QoE", stream=screen)
    assert live.bar is not None and live.bar.n == 200  # a resumed job starts its bar there
    live.last_bar = 0.0
    assert live.training(600, None)
    assert live.bar.n == 600 and " 60%|" in screen.getvalue() and "step/s" in screen.getvalue()
    live.close()


def test_format_clock():
    assert format_clock(3725.0) == "1:02:05"
    assert format_clock(-8.0) == "0:00:00"
    assert format_clock(float("nan")) == "?"
