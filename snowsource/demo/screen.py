"""Drawing the tables: redrawn in place on a terminal, condensed lines otherwise."""

from __future__ import annotations

import shutil
import sys
import time
from typing import Final, TextIO

from snowsource.demo.progress import TableView, human_seconds, summary_line, table_line

# Without a terminal: a table's line when its state or warning changes, all rows in one
# summary line this often.
SUMMARY_SECONDS: Final = 10.0


class Screen:
    """Where the views go; ``draw`` is called a few times per second."""

    def __init__(self, views: list[TableView], started: float, out: TextIO | None = None) -> None:
        self.views = views
        self.started = started
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self._drawn = 0
        self._shown: dict[str, tuple[str, str | None, str | None]] = {}
        self._next_summary = started + SUMMARY_SECONDS

    def width(self) -> int:
        """Terminal width (generous when not a terminal)."""
        return shutil.get_terminal_size((160, 24)).columns if self.tty else 240

    def message(self, text: str) -> None:
        """A line above the live view (which is redrawn below it)."""
        print(f"! {text}", file=self.out, flush=True)
        self._drawn = 0

    def draw(self, footer: str, now: float | None = None, *, final: bool = False) -> None:
        """Refresh the view; ``final`` prints every table once more (after the stop)."""
        now = time.monotonic() if now is None else now
        width = self.width()
        elapsed = now - self.started
        if self.tty:
            lines = [table_line(view, width) for view in self.views]
            lines.append(f"{footer}  (running {human_seconds(elapsed)})"[:width])
            up = f"\x1b[{self._drawn}F" if self._drawn else ""
            self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self.out.flush()
            self._drawn = len(lines)
            return
        stamp = f"[{elapsed:6.1f}s]"
        for view in self.views:
            seen = (view.state, view.failed, view.warning)
            if final or self._shown.get(view.alias) != seen:
                self._shown[view.alias] = seen
                print(f"{stamp} {table_line(view, width)}", file=self.out, flush=True)
        if now >= self._next_summary and not final:
            self._next_summary = now + SUMMARY_SECONDS
            print(f"{stamp} {summary_line(self.views)}", file=self.out, flush=True)
