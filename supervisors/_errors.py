"""The errors supervisors raise.

A supervisor's own failure is a crash like any other, seen by its parent as
a crashed child; these types say why it gave up, or what a management call
got wrong.

The tree::

    SupervisorError
    ├── RestartIntensityExceededError  too many restarts in the window (cause: the last child crash)
    ├── ChildNotFoundError             no child with that id (management call)
    └── DuplicateChildError            a child with that id already exists (start_child)
"""

from __future__ import annotations


class SupervisorError(Exception):
    """Root of every error raised by the supervisors package."""


class RestartIntensityExceededError(SupervisorError):
    """More restarts than allowed inside the window; the supervisor gave up.

    It stopped its children in reverse start order and exits with this
    error, which its own parent sees as a crashed child. The last child
    crash is ``__cause__``.
    """

    def __init__(self, supervisor: str, child: str, max_restarts: int, within: float) -> None:
        self.supervisor = supervisor
        self.child = child
        super().__init__(
            f"supervisor {supervisor!r} gave up: child {child!r} crashed after {max_restarts} "
            f"restarts within {within:g} s; see __cause__ for the crash, fix it, or raise the "
            "restart intensity if such bursts are expected"
        )


class ChildNotFoundError(SupervisorError, LookupError):
    def __init__(self, supervisor: str, child: object) -> None:
        self.supervisor = supervisor
        self.child = child
        super().__init__(
            f"supervisor {supervisor!r} has no child {child!r}; list them with which_children(supervisor)"
        )


class DuplicateChildError(SupervisorError):
    def __init__(self, supervisor: str, child: object) -> None:
        self.supervisor = supervisor
        self.child = child
        super().__init__(
            f"supervisor {supervisor!r} already has a child {child!r}; choose another id or "
            "terminate and delete the existing child first"
        )
