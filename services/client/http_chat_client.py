"""A client of the gateway's OpenAI-compatible HTTP API with ChatClient's interface: one chat
completion per turn, streamed (SSE), the session named by X-Session-Id; the TurnSummary is
rebuilt from the final usage chunk and its `bidaw` extension."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

from services.client.chat_client import TurnResult
from services.runtime.wire_names import TIER_NAMES
from services.runtime.gen import common_pb2

TIERS = {name: tier for tier, name in TIER_NAMES.items() if tier != common_pb2.TIER_UNSPECIFIED}


class HttpError(Exception):
    """The gateway's error: its HTTP status and the OpenAI-style message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def api_base(url: str) -> str:
    """http://host:port or .../v1 -> .../v1"""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _summary(usage: dict, extra: dict, ttft_s: float, latency_s: float) -> common_pb2.TurnSummary:
    return common_pb2.TurnSummary(
        prompt_tokens=usage.get("prompt_tokens", 0),
        completion_tokens=usage.get("completion_tokens", 0),
        cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
        kv_tier=TIERS.get(extra.get("kv_tier"), common_pb2.TIER_NONE),
        ttft_s=extra.get("ttft_s", ttft_s), latency_s=extra.get("latency_s", latency_s))


class HttpChatClient:
    def __init__(self, url: str, api_key: str = "", model: str = "", timeout: float = 600.0):
        self.base = api_base(url)
        self.api_key = api_key
        self.model = model
        self.timeout = timeout

    def turn(self, session_id: str, messages: list[dict] | None = None, max_tokens: int = 0,
             temperature: float = 0.0, on_text: Callable[[str], None] | None = None,
             **_) -> TurnResult:
        body = {"messages": messages or [], "temperature": temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        if max_tokens:
            body["max_tokens"] = max_tokens
        if self.model:
            body["model"] = self.model
        headers = {"Content-Type": "application/json", "X-Session-Id": session_id,
                   **self._auth()}
        request = urllib.request.Request(f"{self.base}/chat/completions",
                                         json.dumps(body).encode(), headers)
        start, first, result = time.perf_counter(), None, TurnResult()
        try:
            reply = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise HttpError(exc.code, _message(exc.read())) from None
        with reply:
            for line in reply:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:  # an error after the stream began
                    raise HttpError(500, chunk["error"].get("message", ""))
                for choice in chunk.get("choices", []):
                    text = choice.get("delta", {}).get("content") or ""
                    if text:
                        first = first or time.perf_counter()
                        result.text += text
                        if on_text:
                            on_text(text)
                if chunk.get("usage"):
                    now = time.perf_counter()
                    result.summary = _summary(chunk["usage"], chunk.get("bidaw") or {},
                                              (first or now) - start, now - start)
        return result

    def end(self, session_id: str) -> bool:
        """End the session (DELETE /v1/sessions/{id}): its KV is freed; False if the gateway
        knew no such session."""
        return self._session_call("DELETE", session_id, "") is not None

    def prepare(self, session_id: str) -> str | None:
        """Say the session's next turn is coming (POST /v1/sessions/{id}/prepare): its KV is
        promoted from SSD to DRAM meanwhile. The KV's tier then, "dram" or "loading"; None if
        the gateway knew no such session."""
        body = self._session_call("POST", session_id, "/prepare")
        return None if body is None else body["kv_tier"]

    def _session_call(self, method: str, session_id: str, suffix: str) -> dict | None:
        """`method` /v1/sessions/{id}{suffix}: its JSON body; None for a 404 (no such session)."""
        request = urllib.request.Request(
            f"{self.base}/sessions/{urllib.parse.quote(session_id, safe='')}{suffix}",
            data=b"" if method == "POST" else None, headers=self._auth(), method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise HttpError(exc.code, _message(exc.read())) from None

    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def close(self) -> None:
        pass


def _message(data: bytes) -> str:
    try:
        return json.loads(data)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return data[:200].decode(errors="replace")
