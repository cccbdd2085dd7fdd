"""deploy/grafana/snowsource.json and deploy/prometheus/alerts.yaml use only metrics the daemon
exports, and every expression in them has PromQL's shape (no Prometheus server needed).

The exported names are read from the daemon's one metrics module (its registry), as exposed:
a counter ``x`` is scraped as ``x_total``, a histogram as ``x_bucket``/``x_sum``/``x_count``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from snowsource.observability import metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "snowsource.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yaml"

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}
FUNCTIONS = {
    "rate", "irate", "increase", "delta", "deriv", "absent", "absent_over_time", "vector",
    "histogram_quantile", "clamp_min", "clamp_max", "max_over_time", "min_over_time",
    "avg_over_time", "changes", "resets", "time", "timestamp", "label_replace", "round", "abs",
}  # fmt: skip
AGGREGATIONS = {
    "sum", "min", "max", "avg", "count", "stddev", "topk", "bottomk", "quantile", "group",
}  # fmt: skip
SET_OPS = {"and", "or", "unless"}
# Grafana's variables, replaced by what they stand for before the expression is parsed.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<duration>\[\s*(?:\d+[smhdwy])+\s*(?::\s*(?:\d+[smhdwy])*\s*)?\])
    | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<matchop>=~|!~|!=)
    | (?P<compare>==|>=|<=|>|<)
    | (?P<arith>[-+*/%^])
    | (?P<punct>[(){},=])
    )""",
    re.VERBOSE,
)


def exported_names() -> set[str]:
    """Every sample name a scrape of the daemon can contain."""
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        for suffix in SUFFIXES[family.type]:
            names.add(family.name + suffix)
    return names


class Shape:
    """A recursive-descent reader of the PromQL subset dashboards and alerts use. It fails on
    unbalanced brackets, unknown functions, misplaced operators and malformed selectors, and
    collects the metric names of every selector."""

    def __init__(self, expr: str) -> None:
        for name, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(name, value)
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        expr = expr.rstrip()
        while pos < len(expr):
            match = TOKEN.match(expr, pos)
            if match is None or match.end() == pos:
                raise AssertionError(f"cannot read {expr[pos:]!r}")
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.pos = 0
        self.metrics: set[str] = set()
        self.expression()
        assert self.pos == len(self.tokens), f"unexpected {self.peek()!r}"

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self, kind: str, text: str | None = None) -> str:
        found = self.peek()
        if found[0] != kind or (text is not None and found[1] != text):
            raise AssertionError(f"expected {text or kind}, found {found[1] or 'the end'!r}")
        self.pos += 1
        return found[1]

    def expression(self) -> None:
        self.unary()
        while True:
            kind, text = self.peek()
            if kind in ("compare", "arith") or text in SET_OPS:
                self.pos += 1
                if self.peek() == ("ident", "bool"):
                    self.pos += 1
                if self.peek()[1] in ("on", "ignoring"):
                    self.pos += 1
                    self.labels()
                    if self.peek()[1] in ("group_left", "group_right"):
                        self.pos += 1
                        if self.peek()[1] == "(":
                            self.labels()
                self.unary()
            else:
                return

    def unary(self) -> None:
        if self.peek() in (("arith", "-"), ("arith", "+")):
            self.pos += 1
        self.primary()
        if self.peek()[0] == "duration":
            self.pos += 1

    def primary(self) -> None:
        kind, text = self.peek()
        if kind in ("number", "string"):
            self.pos += 1
        elif text == "(":
            self.pos += 1
            self.expression()
            self.take("punct", ")")
        elif text == "{":
            self.matchers()
        elif kind == "ident" and text in AGGREGATIONS:
            self.aggregation()
        elif kind == "ident" and self.tokens[self.pos + 1 :][:1] == [("punct", "(")]:
            assert text in FUNCTIONS, f"unknown function {text}"
            self.pos += 1
            self.arguments()
        elif kind == "ident" and text not in SET_OPS:
            self.pos += 1
            self.metrics.add(text)
            if self.peek() == ("punct", "{"):
                self.matchers()
        else:
            raise AssertionError(f"expected an operand, found {text or 'the end'!r}")

    def aggregation(self) -> None:
        self.pos += 1
        if self.peek()[1] in ("by", "without"):
            self.pos += 1
            self.labels()
        self.arguments()
        if self.peek()[1] in ("by", "without"):
            self.pos += 1
            self.labels()

    def arguments(self) -> None:
        self.take("punct", "(")
        if self.peek()[1] != ")":
            self.expression()
            while self.peek() == ("punct", ","):
                self.pos += 1
                self.expression()
        self.take("punct", ")")

    def labels(self) -> None:
        self.take("punct", "(")
        while self.peek()[1] != ")":
            self.take("ident")
            if self.peek() == ("punct", ","):
                self.pos += 1
        self.take("punct", ")")

    def matchers(self) -> None:
        self.take("punct", "{")
        while self.peek()[1] != "}":
            self.take("ident")
            kind, text = self.peek()
            assert kind == "matchop" or text == "=", f"expected a label matcher, found {text!r}"
            self.pos += 1
            self.take("string")
            if self.peek() == ("punct", ","):
                self.pos += 1
        self.take("punct", "}")


def dashboard_exprs() -> Iterator[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        query = variable.get("definition", "")
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
        if found:
            yield f"variable {variable['name']}", found.group(1)


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def every_expr() -> list[tuple[str, str]]:
    return [*dashboard_exprs(), *((f"alert {r['alert']}", r["expr"]) for r in alert_rules())]


@pytest.mark.parametrize(("where", "expr"), every_expr(), ids=[w for w, _ in every_expr()])
def test_every_expression_parses_and_uses_exported_metrics(where: str, expr: str) -> None:
    shape = Shape(expr)
    assert shape.metrics, f"{where} reads no metric"
    unknown = shape.metrics - exported_names()
    assert not unknown, f"{where} uses {sorted(unknown)}, which the daemon does not export"


@pytest.mark.parametrize(
    "bad",
    [
        "sum(rate(snowsource_rows_emitted_total[5m])",
        'snowsource_lag_seconds{table="a"',
        "rate(snowsource_rows_emitted_total[5])",
        "snowsource_lag_seconds > ",
        "sum by table (snowsource_lag_seconds)",
        "frobnicate(snowsource_lag_seconds)",
        'snowsource_lag_seconds{table~"a"}',
        "snowsource_lag_seconds snowsource_ready",
    ],
)
def test_the_shape_check_refuses_malformed_expressions(bad: str) -> None:
    with pytest.raises(AssertionError):
        Shape(bad)


def test_the_name_check_sees_a_misspelt_metric() -> None:
    assert Shape("rate(snowsource_rows_emited_total[5m])").metrics - exported_names()
    assert "snowsource_rows_emitted" not in exported_names()  # scraped as ..._total


def test_the_alerts_cover_what_operators_page_on() -> None:
    rules = alert_rules()
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]
    used = {name for rule in rules for name in Shape(rule["expr"]).metrics}
    # SPEC §14.4: a failing table, lag, readiness, the concurrency limit, offset commits.
    for metric in (
        "snowsource_table_state",
        "snowsource_table_consecutive_failures",
        "snowsource_lag_seconds",
        "snowsource_ready",
        "snowsource_servicenow_concurrency_limit",
        "snowsource_offsets_committed_total",
    ):
        assert metric in used, metric


def test_the_dashboard_is_importable_grafana_json() -> None:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert board["uid"]
    assert board["title"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            for variable in re.findall(r"\$(\w+)", target["expr"]):
                assert variable.startswith("__") or variable in names, (panel["title"], variable)
