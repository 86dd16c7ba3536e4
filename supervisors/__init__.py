"""Scriptorium `supervisors` package: OTP-style supervision (see docs/architecture.md).

Layout: `_errors` (the error tree), `_spec` (child specs, restart types,
strategies), `_intensity` and `_backoff` (pure restart rules, taking `now`),
`_supervisor` (the static supervisor and its management messages),
`_dynamic` (keyed children over `actors.Registry`).
"""

from supervisors._backoff import Backoff as Backoff
from supervisors._backoff import BackoffStreak as BackoffStreak
from supervisors._dynamic import ActivateChild as ActivateChild
from supervisors._dynamic import DynamicSupervisor as DynamicSupervisor
from supervisors._dynamic import DynamicSupervisorStatistics as DynamicSupervisorStatistics
from supervisors._errors import ChildNotFound as ChildNotFound
from supervisors._errors import DuplicateChild as DuplicateChild
from supervisors._errors import RestartIntensityExceeded as RestartIntensityExceeded
from supervisors._errors import SupervisorError as SupervisorError
from supervisors._intensity import Intensity as Intensity
from supervisors._intensity import RestartHistory as RestartHistory
from supervisors._spec import ChildSpec as ChildSpec
from supervisors._spec import Restart as Restart
from supervisors._spec import Strategy as Strategy
from supervisors._supervisor import ChildInfo as ChildInfo
from supervisors._supervisor import ChildStatistics as ChildStatistics
from supervisors._supervisor import DeleteChild as DeleteChild
from supervisors._supervisor import GetChild as GetChild
from supervisors._supervisor import RestartChild as RestartChild
from supervisors._supervisor import StartChild as StartChild
from supervisors._supervisor import Supervisor as Supervisor
from supervisors._supervisor import SupervisorStatistics as SupervisorStatistics
from supervisors._supervisor import TerminateChild as TerminateChild
from supervisors._supervisor import WhichChildren as WhichChildren

__all__ = [
    "ActivateChild",
    "Backoff",
    "BackoffStreak",
    "ChildInfo",
    "ChildNotFound",
    "ChildSpec",
    "ChildStatistics",
    "DeleteChild",
    "DuplicateChild",
    "DynamicSupervisor",
    "DynamicSupervisorStatistics",
    "GetChild",
    "Intensity",
    "Restart",
    "RestartChild",
    "RestartHistory",
    "RestartIntensityExceeded",
    "StartChild",
    "Strategy",
    "Supervisor",
    "SupervisorError",
    "SupervisorStatistics",
    "TerminateChild",
    "WhichChildren",
]
