"""``snowsource emulator`` flags of the instance model."""

from __future__ import annotations

from snowsource.emulator.cli import EXIT_USAGE, build, main, parse_args


def test_the_cli_models_an_instance_by_default() -> None:
    emu = build(parse_args(["--rows", "1", "--tables", "incident"]))
    stats = emu.instance.statistics()
    assert emu.instance.enabled is True
    assert stats["session_sync"] is True
    assert stats["requests_per_session"] == 1
    nodes = stats["nodes"]
    assert isinstance(nodes, list)
    assert [(n["threads"], n["queue"]) for n in nodes] == [(4, 50), (4, 50)]


def test_every_part_of_the_model_has_a_flag() -> None:
    args = parse_args(
        [
            "--rows",
            "1",
            "--tables",
            "incident",
            "--no-session-sync",
            "--requests-per-session",
            "2",
            "--session-queue",
            "3",
            "--nodes",
            "3",
            "--node-threads",
            "2",
            "--node-queue",
            "7",
        ]
    )
    model = build(args).instance
    assert (model.session_sync, model.per_session, model.max_waiting) == (False, 2, 3)
    assert (model.node_threads, model.node_queue) == (2, 7)
    assert len(model.statistics()["nodes"]) == 3  # type: ignore[arg-type]


def test_the_model_can_be_turned_off() -> None:
    emu = build(parse_args(["--rows", "1", "--tables", "incident", "--no-instance-model"]))
    assert emu.instance.enabled is False


def test_an_impossible_model_is_a_usage_error() -> None:
    assert main(["--rows", "1", "--nodes", "0"]) == EXIT_USAGE
    assert main(["--rows", "1", "--requests-per-session", "0"]) == EXIT_USAGE
