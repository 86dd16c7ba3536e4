"""Scriptorium `actors` package: the actor kernel (see docs/architecture.md).

What code that talks to actors uses is here; what code that runs actors
uses (cells, exits, states, crash hooks) is in `actors.lowlevel`.

Layout: `_errors` (the error tree), `_actor` (the base class and its hooks),
`_options` (`MailboxOptions`), `_mailbox` (lanes, envelopes, reply slots),
`_idempotent` (which messages a crash may redeliver), `_cell` (the loop that
outlives incarnations; the runner interface, exported by `lowlevel`), `_ref`
(the public handle), `_run` (`open_actor`), `_registry` (keyed actors),
`_introspect`.
"""

from actors._actor import Actor as Actor
from actors._actor import StopKind as StopKind
from actors._actor import StopReason as StopReason
from actors._cell import ActorStatistics as ActorStatistics
from actors._errors import ActorCrashedError as ActorCrashedError
from actors._errors import ActorError as ActorError
from actors._errors import ActorRestartingError as ActorRestartingError
from actors._errors import ActorStoppedError as ActorStoppedError
from actors._errors import MailboxFull as MailboxFull
from actors._errors import PoisonMessageError as PoisonMessageError
from actors._errors import UnhandledMessageError as UnhandledMessageError
from actors._idempotent import Idempotent as Idempotent
from actors._idempotent import redeliverable as redeliverable
from actors._introspect import ActorSnapshot as ActorSnapshot
from actors._introspect import snapshot as snapshot
from actors._mailbox import Backpressure as Backpressure
from actors._options import DeadLetter as DeadLetter
from actors._options import MailboxOptions as MailboxOptions
from actors._ref import ActorRef as ActorRef
from actors._registry import Registry as Registry
from actors._registry import open_registry as open_registry
from actors._request import Asks as Asks
from actors._request import Request as Request
from actors._run import open_actor as open_actor

__all__ = [
    "Actor",
    "ActorCrashedError",
    "ActorError",
    "ActorRef",
    "ActorRestartingError",
    "ActorSnapshot",
    "ActorStatistics",
    "ActorStoppedError",
    "Asks",
    "Backpressure",
    "DeadLetter",
    "Idempotent",
    "MailboxFull",
    "MailboxOptions",
    "PoisonMessageError",
    "Registry",
    "Request",
    "StopKind",
    "StopReason",
    "UnhandledMessageError",
    "open_actor",
    "open_registry",
    "redeliverable",
    "snapshot",
]
