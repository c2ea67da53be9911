"""Flows (docs/flows.md): trees of parent and child jobs; a parent waits (state
``waiting``) until its children finished, then runs with their results.

The canvas (``echomq.chain``, ``group``, ``chord``, ``flow``) builds trees from task
signatures; these verbs write and inspect them.
"""

from __future__ import annotations

from ._model.flow import ChildFailure, ChildOutcome, Feed, FlowJob, Policy
from ._verbs.flows import (
    MAX_RELAY_TRIES,
    RELAY_GROUP,
    FlowChildren,
    add_flow,
    add_flow_calls,
    cancel_flow,
    children,
    flow_notify_call,
    flow_results_call,
    relay_outbox,
    remote_children,
    remove_flow,
    subtree,
    waiting_parents,
)

__all__ = [
    "ChildFailure",
    "ChildOutcome",
    "Feed",
    "FlowChildren",
    "MAX_RELAY_TRIES",
    "RELAY_GROUP",
    "FlowJob",
    "Policy",
    "add_flow",
    "add_flow_calls",
    "flow_notify_call",
    "relay_outbox",
    "remote_children",
    "cancel_flow",
    "children",
    "flow_results_call",
    "remove_flow",
    "subtree",
    "waiting_parents",
]
