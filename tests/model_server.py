"""A scripted model server on 127.0.0.1: both wire formats, real HTTP, real sockets.

An ASGI app under uvicorn in a thread of its own (its own asyncio loop), so
tests on asyncio and on trio talk to it the same way, as a real endpoint.
It speaks OpenAI chat completions (``POST /v1/chat/completions``) and
Anthropic Messages (``POST /v1/messages``), answering in the structured form
asked (``response_format``, a forced tool, or text).

Each request takes the next behaviour of ``script`` (then ``default``):

* ``good``: an ``append`` of one paragraph per observed record to
  ``topics/notes.md``, each cited with the record's raw handle: a model
  that follows the rules;
* ``invented``: the same with invented ``^id``s and ``e-`` labels;
* ``outside``: cites a handle outside the batch; ``sources``: edits
  ``sources/``; ``malformed``: not JSON; ``empty``: an empty completion;
* ``429`` (``Retry-After: <retry_after>``), ``500``, ``401`` (the body
  echoes the request's credential header: a key must not leak from it),
  ``400`` (over the context length: a refusal naming no structured form);
* ``slow``: answers after ``slow_seconds``; ``reset``: announces a body
  and closes the connection half-way through it;
* ``consolidate`` (a consolidation prompt): merges the paragraphs whose
  text is the same but for case; ``consolidate_drop``: the same, and
  removes the first paragraph "as obsolete" (a model deleting a fact).

``latency`` delays every answer (bench: a fixed 200 ms model);
``fail_every`` injects a 500 on every n-th request (simulate).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

_WORD = re.compile(r"[A-Za-z0-9]+")


def good_actions(prompt: str, *, invent: bool = False,
                 path: str = "topics/notes.md") -> dict[str, Any]:
    """One paragraph per observed record, appended to ``path`` under ## Notes."""
    paragraphs: list[str] = []
    notes: list[str] = []
    date = "undated"
    for line in prompt.split("\n"):
        if line.startswith("## Observed "):
            date = line.removeprefix("## Observed ").strip()
        if not line.startswith('{"ref"'):
            continue
        record = json.loads(line)
        n = len(paragraphs) + 1
        words = " ".join(_WORD.findall(record["content"])[:12]) or "something"
        speaker = " ".join(_WORD.findall(record["speaker"])) or "someone"
        ids = " ^deadbeef" if invent else ""
        label = f"e-{n:010d}" if invent else f"e{n}"
        paragraphs.append(f"{speaker} noted: {words}.[^{label}]{ids}")
        notes.append(f"[^{label}]: Time: `{date}`; Sources: {record['ref']}")
    if not paragraphs:
        return {"edits": []}
    return {"edits": [{"action": "append", "path": path, "section": "## Notes",
                       "text": "\n\n".join(paragraphs) + "\n\n" + "\n".join(notes),
                       "delete_blocks": []}]}


def consolidation_edits(prompt: str, *, drop: bool = False) -> dict[str, Any]:
    """Merges of the paragraphs of a consolidation prompt whose text is equal but for case."""
    groups: dict[str, list[str]] = {}
    first = ""
    for line in prompt.split("\n"):
        if line.startswith('{"block"'):
            paragraph = json.loads(line)
            first = first or paragraph["block"]
            groups.setdefault(paragraph["text"].lower(), []).append(paragraph["block"])
    edits: list[dict[str, Any]] = [{"action": "merge", "blocks": blocks, "text": text.capitalize()}
                                   for text, blocks in groups.items() if len(blocks) > 1]
    if drop and first:
        edits.append({"action": "remove", "block": first, "reason": "obsolete"})
    return {"edits": edits}


def first_user_text(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


@dataclass
class ScriptedModel:
    script: collections.deque[str] | list[str] = field(default_factory=collections.deque)
    default: str = "good"
    latency: float = 0.0
    slow_seconds: float = 2.0
    retry_after: str = "1"
    fail_every: int = 0
    refuse_response_format: bool = False
    per_session_files: bool = False  # topics/<session>.md instead of topics/notes.md
    requests: list[dict[str, Any]] = field(default_factory=list)
    behaviours: list[str] = field(default_factory=list)
    disconnects: int = 0
    port: int = 0

    def __post_init__(self) -> None:
        self.script = collections.deque(self.script)  # a list reads as well

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def next_behaviour(self) -> str:
        if self.fail_every and (len(self.behaviours) + 1) % self.fail_every == 0:
            return "500"
        assert isinstance(self.script, collections.deque)
        return self.script.popleft() if self.script else self.default

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw or b"{}")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append({"path": scope["path"], "query": scope["query_string"].decode(),
                              "headers": headers, "body": body})
        provider = "anthropic" if scope["path"].endswith("/messages") else "openai"
        if self.refuse_response_format and "response_format" in body:
            self.behaviours.append("refuse_format")
            await _reply(send, 400, {"error": {"message": "response_format is not supported"}})
            return
        behaviour = self.next_behaviour()
        self.behaviours.append(behaviour)
        if self.latency:
            await asyncio.sleep(self.latency)
        if behaviour == "429":
            await _reply(send, 429, {"error": "slow down"}, {"retry-after": self.retry_after})
            return
        if behaviour == "500":
            await _reply(send, 500, {"error": "upstream failed"})
            return
        if behaviour == "400":  # the batch's own refusal: it names no structured form
            await _reply(send, 400, {"error": {"message": "This model's maximum context length "
                                               "is 8192 tokens; reduce the messages."}})
            return
        if behaviour == "401":
            echoed = headers.get("authorization") or headers.get("x-api-key") or ""
            await _reply(send, 401, {"error": f"bad credential {echoed}"})
            return
        if behaviour == "slow":
            # The body is read: the next receive() returns only on a disconnect.
            try:
                gone = await asyncio.wait_for(receive(), self.slow_seconds)
            except TimeoutError:
                gone = None
            if gone is not None and gone.get("type") == "http.disconnect":
                self.disconnects += 1
                return
        if behaviour == "reset":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"5000")]})
            await send({"type": "http.response.body", "body": b'{"choices": [', "more_body": True})
            raise ConnectionResetError("the scripted model drops the connection mid-body")
        prompt = first_user_text(body)
        if behaviour in ("good", "slow"):
            answer: dict[str, Any] | str = good_actions(prompt, path=self._path(prompt))
        elif behaviour == "invented":
            answer = good_actions(prompt, invent=True)
        elif behaviour == "outside":
            answer = good_actions(prompt)
            edits = answer["edits"]
            if edits:
                edits[0]["text"] = edits[0]["text"].replace(
                    "Sources: openprogram/", "Sources: openprogram/elsewhere-", 1)
        elif behaviour == "sources":
            answer = good_actions(prompt)
            for edit in answer["edits"]:
                edit["path"] = "sources/openprogram/forged.md"
        elif behaviour == "malformed":
            answer = '{"edits": [{"action": "append", "path": '
        elif behaviour == "empty":
            answer = ""
        elif behaviour == "nothing":  # nothing worth remembering, as the prompt allows
            answer = {"edits": []}
        elif behaviour in ("consolidate", "consolidate_drop"):
            answer = consolidation_edits(prompt, drop=behaviour == "consolidate_drop")
        else:
            raise ValueError(f"unknown behaviour {behaviour!r}")
        await _reply(send, 200, completion_body(provider, body, answer))

    def _path(self, prompt: str) -> str:
        if not self.per_session_files:
            return "topics/notes.md"
        match = re.search(r'"ref": "openprogram/([^/"]+)/', prompt)
        return f"topics/{match.group(1) if match else 'notes'}.md"

    @contextlib.contextmanager
    def running(self) -> Iterator[ScriptedModel]:
        """Serve on a free loopback port in a thread for the block's duration."""
        sock = socket.socket()
        # Accepted sockets inherit it: uvicorn writes headers and body apart, and
        # Nagle against the client's delayed ACK would add 40 ms to every answer.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self, log_level=os.environ.get("MODEL_SERVER_LOG", "critical"), lifespan="off", access_log=False,
                                timeout_keep_alive=30)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the scripted model server did not start")
            threading.Event().wait(0.005)
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(10)
            sock.close()


def completion_body(provider: str, body: dict[str, Any], answer: dict[str, Any] | str) -> Any:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    usage_in, usage_out = max(1, len(json.dumps(body)) // 4), max(1, len(text) // 4)
    if provider == "anthropic":
        if body.get("tools") and not isinstance(answer, str):
            content: list[dict[str, Any]] = [{"type": "tool_use", "id": "toolu_1",
                                              "name": body["tools"][0]["name"], "input": answer}]
        else:
            content = [{"type": "text", "text": text}] if text else []
        return {"id": "msg_1", "type": "message", "role": "assistant", "content": content,
                "stop_reason": "end_turn",
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out}}
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if body.get("tools") and not isinstance(answer, str):
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": body["tools"][0]["function"]["name"], "arguments": text}}]}
    return {"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out}}


async def _reply(send: Any, status: int, document: Any,
                 headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        *((k.encode(), v.encode()) for k, v in (headers or {}).items())]})
    await send({"type": "http.response.body", "body": payload})


@contextlib.contextmanager
def model_server_process(**options: Any) -> Iterator[str]:
    """The server in a process of its own (bench: its CPU is not the client's); yields the base URL.

    Options are :class:`ScriptedModel` fields of type float or bool, and ``default``.
    """
    import subprocess
    import sys

    args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "tests.model_server", *args], cwd=root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the server exits when its stdin closes
        proc.wait(10)


def _main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="serve the scripted model until stdin closes")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--per-session-files", default="False")
    parser.add_argument("--default", default="good")
    args = parser.parse_args()
    model = ScriptedModel(latency=args.latency, default=args.default,
                          per_session_files=args.per_session_files == "True")
    with model.running():
        print(model.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _main()
