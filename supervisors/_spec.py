"""Child specifications: what a supervisor starts, and when it restarts it.

OTP's vocabulary, because it is the one users of supervisors already know:
``PERMANENT`` children are always restarted, ``TRANSIENT`` ones only after
an abnormal exit (a crash), ``TEMPORARY`` ones never. ``shutdown_timeout``
is how long an orderly stop may take before the child is cancelled.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from actors import Actor, MailboxOptions

# The messages the child accepts (contravariant, as ``Actor``'s): a list of
# specs of different children is a list of ``ChildSpec[Never]``.
M_contra = TypeVar("M_contra", contravariant=True)


class Restart(enum.Enum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"

    def restarts_after(self, crash: BaseException | None) -> bool:
        """Whether a child of this type comes back after exiting with ``crash``."""
        if self is Restart.PERMANENT:
            return True
        return self is Restart.TRANSIENT and crash is not None


class Strategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"  # restart only the crashed child
    ONE_FOR_ALL = "one_for_all"  # stop all others, restart all
    REST_FOR_ONE = "rest_for_one"  # stop those started after it, restart it and them


@dataclass(frozen=True)
class ChildSpec(Generic[M_contra]):
    """One child: its id, its factory (an Actor or a Supervisor) and its policies.

    ``get_child(supervisor, spec)`` returns the child's reference typed
    ``ActorRef[M]`` from its ``ChildSpec[M]``.

    ``options`` is the child's mailbox; ``None`` takes the supervisor's
    ``options`` (the default for all its children).
    """

    id: str
    start: Callable[[], Actor[M_contra]]
    restart: Restart = Restart.PERMANENT
    shutdown_timeout: float | None = 5.0
    options: MailboxOptions | None = None
