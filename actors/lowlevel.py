"""The runner's side of the actor kernel, for code that runs actors itself.

Supervisors, registries and benchmarks drive cells directly: they start an
incarnation, watch it end and decide what comes next. Code that only talks
to actors needs none of this and imports from ``actors``; as with
``trio.lowlevel``, what is here is public but has fewer guarantees of
convenience: a cell does what it is told, and its runner keeps the rules
(see ``ActorCell``).

- ``ActorCell``: the mailbox and message loop that outlive incarnations;
  ``run_incarnation()``, ``close()``, ``post_system()``.
- ``Exit``: how an incarnation ended without crashing.
- ``ActorState``: a cell's lifecycle state.
- ``CrashHook``: a registry's question to its supervisor, ``(key, cell, crash)
  -> delay | None``.
"""

from actors._cell import ActorCell, ActorState, Exit
from actors._registry import CrashHook

__all__ = ["ActorCell", "ActorState", "CrashHook", "Exit"]
