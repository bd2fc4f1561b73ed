"""A small client of the Scheduler API: one turn of a session, streamed."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.wire_names import TIER_NAMES


HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")
TARGET_HELP = ("the gateway's URL (http://HOST:PORT or http://HOST:PORT/v1, what `bidaw up` "
               "prints first) or the scheduler's gRPC address HOST:PORT")


class TargetError(ValueError):
    """--target names neither a gateway URL nor a scheduler address."""


def target_kind(target: str) -> str:
    """'http' for a gateway URL, 'grpc' for a scheduler HOST:PORT; TargetError otherwise."""
    scheme, sep, _ = target.partition("://")
    if sep:
        if scheme.lower() in ("http", "https"):
            return "http"
        raise TargetError(f"--target {target!r}: the scheme {scheme!r} is not served here; "
                          f"expected {TARGET_HELP}")
    if HOST_PORT.fullmatch(target):
        return "grpc"
    raise TargetError(f"--target {target!r}: expected {TARGET_HELP}")


def grpc_hint(target: str, details: str) -> str:
    """A clearer message for a scheduler address that answers HTTP (the gateway's port)."""
    if "http1.x server" in details or "Failed parsing HTTP/2" in details:
        return (f"{target} answers HTTP/1.1, not the scheduler's gRPC: is it the gateway? Use "
                f"--target http://{target}/v1 (or the scheduler's HOST:PORT)")
    return details


@dataclass
class TurnResult:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    summary: common_pb2.TurnSummary = field(default_factory=common_pb2.TurnSummary)

    @property
    def tier(self) -> str:
        return TIER_NAMES[self.summary.kv_tier]


class ChatClient:
    def __init__(self, target: str, timeout: float = 600.0):
        self._channel = channel(target)
        self.stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
        self.timeout = timeout

    def turn(self, session_id: str, messages: list[dict] | None = None,
             prompt_token_ids: list[int] | None = None, max_tokens: int = 0,
             temperature: float = 0.0, ignore_eos: bool = False,
             on_text: Callable[[str], None] | None = None) -> TurnResult:
        request = common_pb2.TurnRequest(
            session_id=session_id, max_tokens=max_tokens, temperature=temperature,
            ignore_eos=ignore_eos, prompt_token_ids=prompt_token_ids or [],
            messages=[common_pb2.ChatMessage(**m) for m in messages or []])
        result = TurnResult()
        for event in self.stub.SubmitTurn(request, timeout=self.timeout):
            result.token_ids.extend(event.token_ids)
            result.text += event.text
            if event.text and on_text:
                on_text(event.text)
            if event.HasField("summary"):
                result.summary = event.summary
        return result

    def end(self, session_id: str) -> bool:
        """End the session (the scheduler's EndSession): its KV is freed; False if nothing
        knew it."""
        return self.stub.EndSession(scheduler_pb2.EndSessionRequest(session_id=session_id),
                                    timeout=self.timeout).known

    def prepare(self, session_id: str) -> str | None:
        """Say the session's next turn is coming (the scheduler's PrepareSession): its KV is
        promoted from SSD to DRAM meanwhile. The tier then, "dram" or "loading"; None if the
        store holds no KV of it."""
        reply = self.stub.PrepareSession(
            scheduler_pb2.PrepareSessionRequest(session_id=session_id), timeout=self.timeout)
        return TIER_NAMES[reply.tier] if reply.known else None

    def close(self) -> None:
        self._channel.close()


class Conversation:
    """Keeps the message history of one session, as an OpenAI-style client would."""

    def __init__(self, client: ChatClient, session_id: str, system: str | None = None):
        self.client = client
        self.session_id = session_id
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []

    def say(self, text: str, **kwargs) -> TurnResult:
        self.messages.append({"role": "user", "content": text})
        result = self.client.turn(self.session_id, self.messages, **kwargs)
        self.messages.append({"role": "assistant", "content": result.text})
        return result
