"""The kernel's two surfaces: `actors` for code that talks to actors, `actors.lowlevel` for runners."""

from __future__ import annotations

import actors
import actors.lowlevel

RUNNERS_PARTS = {"ActorCell", "ActorState", "CrashHook", "Exit"}


def test_the_runners_parts_are_in_lowlevel_only() -> None:
    assert set(actors.lowlevel.__all__) >= RUNNERS_PARTS
    assert not set(actors.__all__) & set(actors.lowlevel.__all__)
    assert not [name for name in RUNNERS_PARTS if hasattr(actors, name)]


def test_what_a_user_writes_is_in_actors() -> None:
    assert {
        "Actor", "ActorRef", "open_actor", "open_registry", "MailboxOptions", "Backpressure",
        "Idempotent", "ActorError", "MailboxFull",
    } <= set(actors.__all__)
