"""
The names the engine writes, each once: the codes of its own failures and the names of events.

A ``StepError`` the engine makes itself (a lost worker, a lost dispatch, a missing handler, a dead
run) has one of the ``FailureCode`` values as its ``code`` and, as its ``type``, the name of a
class of ``effects.durable`` that exists (``WorkerLost``, ...), so replay and readers can find it.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "CANCELLED",
    "EVENT_NAMES",
    "FAILURE_CODES",
    "MAX_RECOVERY",
    "NO_HANDLER",
    "NON_DETERMINISM",
    "REDISPATCHED",
    "RUN_DEAD",
    "STEP_LOST",
    "TIMEOUT",
    "WORKER_LOST",
    "WORKFLOW_TIMEOUT",
    "EventName",
    "FailureCode",
]

FailureCode = Literal[
    "worker_lost",
    "remote_step_lost",
    "remote_step_redispatched",
    "remote_step_timeout",
    "no_handler",
    "max_recovery_attempts",
    "non_determinism",
    "cancelled",
    "workflow_timeout",
    "run_dead",
]
#: A worker's claim expired before it reported: a retryable failure of that attempt.
WORKER_LOST: Final[FailureCode] = "worker_lost"
#: A dispatch stayed lost past ``remote_redispatch_max`` re-drives: the step fails for good.
STEP_LOST: Final[FailureCode] = "remote_step_lost"
#: A dispatch's lease lapsed and it was sent again (told to hooks, not recorded as a failure).
REDISPATCHED: Final[FailureCode] = "remote_step_redispatched"
#: A liveness step went silent past its window.
TIMEOUT: Final[FailureCode] = "remote_step_timeout"
#: No worker of the step's group has a handler of its name.
NO_HANDLER: Final[FailureCode] = "no_handler"
#: A run's lease expired more than ``max_recovery_attempts`` times: it is dead.
MAX_RECOVERY: Final[FailureCode] = "max_recovery_attempts"
#: Replay met another step than the one recorded.
NON_DETERMINISM: Final[FailureCode] = "non_determinism"
#: The run was cancelled: the code of an attempt a cancel withdrew, and of a cancelled run's
#: error when some of its compensations failed.
CANCELLED: Final[FailureCode] = "cancelled"
#: The run passed its whole-run deadline: the code of its error, and of each attempt withdrawn.
WORKFLOW_TIMEOUT: Final[FailureCode] = "workflow_timeout"
#: A child workflow's run ended dead (its lease expired too many times): the code of the
#: ``ChildWorkflowError`` its parent meets.
RUN_DEAD: Final[FailureCode] = "run_dead"
FAILURE_CODES: Final = frozenset(get_args(FailureCode))

EventName = Literal[
    "run.started",
    "run.completed",
    "run.failed",
    "run.dead",
    "run.recovered",
    "run.reconciling",
    "run.requeued",
    "run.cancelled",
    "run.cancel_requested",
    "run.error_routed",
    "step.started",
    "step.completed",
    "step.failed",
    "step.retry_scheduled",
    "step.gave_up",
    "step.dispatched",
    "step.redispatched",
    "step.lost",
    "step.queued",
    "step.admitted",
    "step.withdrawn",
    "step.result_discarded",
    "step.compensation_failed",
]
EVENT_NAMES: Final = frozenset(get_args(EventName))
