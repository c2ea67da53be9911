"""The public surface: ``echomq.__all__`` is sorted and complete, the whole error tree is
importable from ``echomq``, and ``errors.__all__`` keeps the reading order of the tree drawn
in its docstring (ruff's RUF022 is off for that reason, see pyproject.toml)."""

from __future__ import annotations
import __future__

import inspect
import pickle
import re

import echomq
from echomq import errors


def test_all_is_sorted_and_every_name_exists() -> None:
    assert echomq.__all__ == sorted(echomq.__all__)
    assert len(set(echomq.__all__)) == len(echomq.__all__)
    for name in echomq.__all__:
        assert hasattr(echomq, name), name


def test_all_is_complete() -> None:
    """Every public, non-module name of the package is listed (modules listed are kept)."""
    public = {
        name
        for name, value in vars(echomq).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and value is not __future__.annotations
    }
    assert public - set(echomq.__all__) == set()


def test_the_error_tree_is_exported_at_top_level() -> None:
    """``echomq.JobGone`` is ``echomq.errors.JobGone``, and so for every error."""
    for name in errors.__all__:
        assert name in echomq.__all__, f"add {name} to echomq/__init__.py"
        assert getattr(echomq, name) is getattr(errors, name)


def test_errors_all_follows_the_tree_in_the_docstring() -> None:
    """Each class is drawn in the tree, in the order of ``errors.__all__``."""
    assert errors.__doc__ is not None
    drawn = re.findall(r"(?:[├└]── |^    )([A-Z]\w+)", errors.__doc__, flags=re.M)
    assert drawn == errors.__all__


def test_errors_read_as_echomq_names() -> None:
    """Exceptions carry ``__module__ == "echomq"`` (tracebacks say ``echomq.JobGone``), as
    trio does; they still pickle (process-pool tasks send them across)."""
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert cls.__module__ == "echomq", name
        assert issubclass(cls, Exception)
    gone = pickle.loads(pickle.dumps(echomq.JobGone("job x has no row")))
    assert type(gone) is echomq.JobGone and str(gone) == "job x has no row"
    failed = pickle.loads(pickle.dumps(echomq.JobFailed("x", "boom")))
    assert (failed.job_id, failed.error, str(failed)) == ("x", "boom", "job x failed: boom")
    cancelled = pickle.loads(pickle.dumps(echomq.JobCancelled("stop", job_id="x")))
    assert (cancelled.reason, cancelled.job_id) == ("stop", "x")
    retry = pickle.loads(pickle.dumps(echomq.Retry(delay=2.5, reason="later")))
    assert (retry.delay, retry.reason) == (2.5, "later")
    big = pickle.loads(pickle.dumps(echomq.PayloadTooLarge("result", 10, 5)))
    assert (big.name, big.size, big.limit, str(big)) == (
        "result", 10, 5, "result is 10 bytes, over the limit of 5 bytes",
    )  # fmt: skip
