"""The demo's table lines: progress and ETA while backfilling, lag once streaming, warnings,
and the condensed output without a terminal."""

from __future__ import annotations

import io

from snowsource.demo.progress import (
    CAUGHT_UP_BACKLOG,
    RateEstimate,
    TableView,
    apply_event,
    human_seconds,
    summary_line,
    table_line,
)
from snowsource.demo.screen import SUMMARY_SECONDS, Screen


def _view(**changes: object) -> TableView:
    view = TableView("incident", "servicenow.incident", "")
    for key, value in changes.items():
        setattr(view, key, value)
    return view


def test_no_rate_from_the_first_page() -> None:
    rate = RateEstimate()
    rate.add(0.0, 0)
    rate.add(2.0, 17)  # one small page after two seconds
    assert rate.value is None
    rate.add(2.5, 150)
    assert rate.value is None  # still under 200 rows
    rate.add(3.5, 400)
    assert rate.value is not None


def test_the_rate_is_smoothed_over_a_window() -> None:
    rate = RateEstimate(window=10.0, min_seconds=3.0, min_rows=200, smoothing=0.3)
    for second in range(31):
        rate.add(float(second), second * 1000)  # a steady 1 000 rows/s
    assert rate.value is not None
    assert abs(rate.value - 1000) < 1
    # A burst doubles the window's rate (2 000 rows/s); the estimate moves 30 % of the way.
    rate.add(31.0, 31_000 + 10_000)
    assert abs(rate.value - 1300) < 1


def test_backfill_shows_progress_and_eta_not_the_newest_rows_age() -> None:
    view = _view(total=20_000, rows=17)
    view.rate.add(0.0, 0)
    view.rate.add(2.0, 17)
    line = table_line(view, 200)
    assert "backfill" in line
    assert "17/20,000 rows" in line
    assert "ETA estimating" in line
    assert "lag" not in line
    for second in range(3, 13):
        view.rows = second * 1000
        view.rate.add(float(second), view.rows)
    line = table_line(view, 200)
    assert "12,000/20,000 rows" in line
    eta = view.eta()
    assert eta is not None
    assert 6 < eta < 9  # 8 000 rows left at about 1 000 rows/s
    assert f"ETA {human_seconds(eta)}" in line


def test_stream_only_once_caught_up_and_read_back() -> None:
    view = _view(total=3000, rows=1000, phase="stream", backlog=2000, lag_s=1.5)
    assert view.state == "backfill"  # the daemon is done, thousands still arriving
    view.rows, view.backlog = 3000, CAUGHT_UP_BACKLOG
    assert view.state == "stream"
    line = table_line(view, 200)
    assert "stream" in line
    assert "lag 1.5s" in line
    assert "ETA" not in line
    assert _view(phase="backfill", backlog=0).state == "starting"


def test_the_last_warning_per_table_is_shown() -> None:
    views = {"incident": _view(total=100, rows=10)}
    event = {
        "event": "ServiceNow request failed; retrying",
        "level": "warning",
        "table": "incident",
        "error": "GET http://x/api/now/table/incident: HTTP 503",
    }
    assert apply_event(views, event) is None
    assert apply_event(views, {**event, "error": "HTTP 429"}) is None
    view = views["incident"]
    assert view.warnings == 2
    assert view.warning == "ServiceNow request failed; retrying: HTTP 429"
    assert "! ServiceNow request failed; retrying: HTTP 429" in table_line(view, 300)
    # A warning without a table is a message above the view.
    general = {"event": "Kafka is not reachable", "level": "warning"}
    assert apply_event(views, general) == "snowsource warning: Kafka is not reachable"


def test_failed_and_sweep_events() -> None:
    views = {"incident": _view()}
    sweep = {"event": "sweep", "table": "incident", "phase": "stream", "lag_s": 2.5}
    apply_event(views, sweep)
    assert (views["incident"].sweeps, views["incident"].lag_s) == (1, 2.5)
    failed = {"event": "table FAILED", "table": "incident", "error": "HTTP 403"}
    assert apply_event(views, failed) == "incident FAILED: HTTP 403"
    assert table_line(views["incident"], 200).split() == ["incident", "FAILED", "HTTP", "403"]


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_headless_prints_a_line_on_change_and_a_summary_every_ten_seconds() -> None:
    views = [_view(total=1000), TableView("change", "servicenow.change", "", total=500)]
    out = _Pipe()
    screen = Screen(views, started=0.0, out=out)
    for tick in range(61):  # 30 s at two draws a second
        now = tick / 2
        views[0].rows = min(tick * 20, 1000)
        views[1].rows = min(tick * 10, 500)
        if views[0].rows == 1000:
            views[0].phase, views[0].backlog = "stream", 0
        screen.draw("headless", now)
    lines = out.getvalue().splitlines()
    table_lines = [line for line in lines if "rows to Kafka" not in line]
    summaries = [line for line in lines if "rows to Kafka" in line]
    # incident: starting, backfill, stream; change: starting, backfill.
    assert len(table_lines) == 5, lines
    assert len(summaries) == int(30 // SUMMARY_SECONDS)
    assert summaries[-1].endswith(summary_line(views))
