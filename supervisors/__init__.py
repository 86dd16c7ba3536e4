"""Scriptorium `supervisors` package: OTP-style supervision (see docs/architecture.md).

Layout: `_errors` (the error tree), `_spec` (child specs, restart types,
strategies), `_intensity` and `_backoff` (pure restart rules, taking `now`),
`_supervisor` (the static supervisor and its management functions),
`_dynamic` (keyed children over `actors.Registry`).
"""

from supervisors._backoff import Backoff as Backoff
from supervisors._backoff import BackoffStreak as BackoffStreak
from supervisors._dynamic import DynamicSupervisor as DynamicSupervisor
from supervisors._dynamic import DynamicSupervisorMessage as DynamicSupervisorMessage
from supervisors._dynamic import DynamicSupervisorStatistics as DynamicSupervisorStatistics
from supervisors._dynamic import activate_child as activate_child
from supervisors._errors import ChildNotFoundError as ChildNotFoundError
from supervisors._errors import DuplicateChildError as DuplicateChildError
from supervisors._errors import RestartIntensityExceededError as RestartIntensityExceededError
from supervisors._errors import SupervisorError as SupervisorError
from supervisors._intensity import Intensity as Intensity
from supervisors._intensity import RestartHistory as RestartHistory
from supervisors._spec import ChildSpec as ChildSpec
from supervisors._spec import Restart as Restart
from supervisors._spec import Strategy as Strategy
from supervisors._supervisor import ChildInfo as ChildInfo
from supervisors._supervisor import ChildStatistics as ChildStatistics
from supervisors._supervisor import Supervisor as Supervisor
from supervisors._supervisor import SupervisorMessage as SupervisorMessage
from supervisors._supervisor import SupervisorStatistics as SupervisorStatistics
from supervisors._supervisor import delete_child as delete_child
from supervisors._supervisor import get_child as get_child
from supervisors._supervisor import restart_child as restart_child
from supervisors._supervisor import start_child as start_child
from supervisors._supervisor import terminate_child as terminate_child
from supervisors._supervisor import which_children as which_children

__all__ = [
    "Backoff",
    "BackoffStreak",
    "ChildInfo",
    "ChildNotFoundError",
    "ChildSpec",
    "ChildStatistics",
    "DuplicateChildError",
    "DynamicSupervisor",
    "DynamicSupervisorMessage",
    "DynamicSupervisorStatistics",
    "Intensity",
    "Restart",
    "RestartHistory",
    "RestartIntensityExceededError",
    "Strategy",
    "Supervisor",
    "SupervisorError",
    "SupervisorMessage",
    "SupervisorStatistics",
    "activate_child",
    "delete_child",
    "get_child",
    "restart_child",
    "start_child",
    "terminate_child",
    "which_children",
]
