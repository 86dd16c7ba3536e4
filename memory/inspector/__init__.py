"""Scriptorium `memory.inspector`: a local, read-only web inspector of a state and a live runtime.

Layout (see docs/architecture.md): ``_state`` what the pages show, read
without writing (sessions and the audit as found); ``_graph`` a session's
DAG laid out and drawn as SVG on the server; ``_sources`` recall over the
state (an index in memory) or a running runtime (``run --inspect``);
``_app`` the Starlette app, its templates and assets; ``_serve`` uvicorn in
its own thread, loopback unless allowed otherwise. An optional extra:
``pip install -e '.[inspect]'`` from the Scriptorium checkout.
"""

from memory.inspector._app import inspector_app as inspector_app
from memory.inspector._graph import lay_out as lay_out
from memory.inspector._serve import InspectorServer as InspectorServer
from memory.inspector._serve import check_bind as check_bind
from memory.inspector._serve import is_loopback as is_loopback
from memory.inspector._sources import LiveRuntime as LiveRuntime
from memory.inspector._sources import StateMemory as StateMemory

__all__ = [
    "InspectorServer",
    "LiveRuntime",
    "StateMemory",
    "check_bind",
    "inspector_app",
    "is_loopback",
    "lay_out",
]
