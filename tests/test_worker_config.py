"""``WorkerConfig`` is the one place a worker option is declared: ``Worker`` takes it (or
its fields as keywords), and the ``echomq worker`` flags and ``ECHOMQ_*`` variables are
generated from its fields."""

from __future__ import annotations

import math

import attrs
import pytest

import echomq
from echomq.cli import build_parser
from echomq.cli.worker_cmd import config_from_flags
from echomq.config import WorkerConfig, env_name
from echomq.errors import InvalidArgument


def test_worker_takes_a_config_or_its_fields(closed_port_url: str) -> None:
    q = echomq.Queue("config-test", url=closed_port_url)
    assert echomq.Worker(q).config == WorkerConfig()
    worker = echomq.Worker(q, WorkerConfig(concurrency=3), grace=0)
    assert worker.config == WorkerConfig(concurrency=3, grace=0.0)
    assert (worker.concurrency, worker.grace) == (3, 0.0)
    assert echomq.Worker(q, grace=math.inf).grace == math.inf
    with pytest.raises(InvalidArgument, match="unknown worker option"):
        echomq.Worker(q, concurency=3)
    with pytest.raises(InvalidArgument):
        echomq.Worker(q, config={"concurrency": 3})  # type: ignore[arg-type]


def test_every_field_is_a_flag_and_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags win over ``ECHOMQ_<FIELD>``, which wins over the default."""
    for field in attrs.fields(WorkerConfig):
        monkeypatch.delenv(env_name(field.name), raising=False)
    parser = build_parser()
    args = parser.parse_args(["worker", "app:queue"])
    assert config_from_flags(args) == WorkerConfig()
    monkeypatch.setenv("ECHOMQ_CONCURRENCY", "5")
    monkeypatch.setenv("ECHOMQ_RECOVERY", "stalled")
    args = parser.parse_args(["worker", "app:queue", "--grace", "1.5", "--max-stalled", "2"])
    assert config_from_flags(args) == WorkerConfig(
        concurrency=5, recovery="stalled", grace=1.5, max_stalled=2
    )
    args = parser.parse_args(["worker", "app:queue", "--concurrency", "7"])
    assert config_from_flags(args).concurrency == 7
    help_text = parser._subparsers._group_actions[0].choices["worker"].format_help()  # type: ignore[union-attr]
    for field in attrs.fields(WorkerConfig):
        assert "--" + field.name.replace("_", "-") in help_text
        assert env_name(field.name) in help_text


def test_bad_values_are_refused_from_flags_and_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["worker", "app:queue", "--concurrency", "many"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["worker", "app:queue", "--recovery", "sometimes"])
    monkeypatch.setenv("ECHOMQ_CONCURRENCY", "lots")
    with pytest.raises(InvalidArgument, match="ECHOMQ_CONCURRENCY"):
        config_from_flags(parser.parse_args(["worker", "app:queue"]))
    assert echomq.cli.main(["worker", "app:queue"]) == 2
    monkeypatch.setenv("ECHOMQ_CONCURRENCY", "0")
    with pytest.raises(InvalidArgument):
        config_from_flags(parser.parse_args(["worker", "app:queue"]))
