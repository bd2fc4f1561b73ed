"""The Responses API's objects: the response (one assistant message of output text), its usage
and the stream's typed events, in OpenAI's shapes, built from the turn's text and TurnSummary;
with logprobs asked for, the worker's per-token records (`steps`) in chat's per-token shape."""
from __future__ import annotations

import time
import uuid

from services.gateway import logprobs as shapes
from services.gateway.responses import extension
from services.gateway.responses_input import ResponseAsk


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def input_items(ask: ResponseAsk) -> list[dict]:
    """GET /v1/responses/{id}/input_items: this response's own input, as message items."""
    return [{"id": _id("msg"), "type": "message", "role": role, "status": "completed",
             "content": [{"type": "output_text" if role == "assistant" else "input_text",
                          "text": text, **({"annotations": []} if role == "assistant" else {})}]}
            for role, text in ask.own]


def usage(summary) -> dict:
    return {"input_tokens": summary.prompt_tokens,
            "input_tokens_details": {"cached_tokens": summary.cached_tokens},
            "output_tokens": summary.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": summary.prompt_tokens + summary.completion_tokens}


class ResponseReply:
    """One response's identity, its object at each stage, and its stream events in order."""

    def __init__(self, ask: ResponseAsk, model: str, temperature: float, top_p: float):
        self.ask = ask
        self.model = model
        self.id = _id("resp")
        self.message_id = _id("msg")
        self.created = int(time.time())
        self.sampling = (temperature, top_p)
        self.sequence = 0

    def logprobs(self, steps) -> list[dict]:
        return shapes.chat(steps)["content"] if self.ask.parsed.logprobs else []

    def message(self, text: str, status: str, steps=()) -> dict:
        content = [{"type": "output_text", "text": text, "annotations": [],
                    "logprobs": self.logprobs(steps)}]
        return {"id": self.message_id, "type": "message", "role": "assistant",
                "status": status, "content": content if status != "in_progress" else []}

    def response(self, text: str | None = None, summary=None, steps=()) -> dict:
        """The response object: in progress (no summary yet) or finished; `steps`: every
        token's logprobs, when asked."""
        status, incomplete, output = "in_progress", None, []
        if summary is not None:
            cut = summary.finish_reason == "length"
            status = "incomplete" if cut else "completed"
            incomplete = {"reason": "max_output_tokens"} if cut else None
            output = [self.message(text or "", status, steps)]
        ask = self.ask
        body = {"id": self.id, "object": "response", "created_at": self.created,
                "status": status, "error": None, "incomplete_details": incomplete,
                "instructions": ask.instructions, "max_output_tokens": ask.max_output_tokens,
                "model": self.model, "output": output, "parallel_tool_calls": True,
                "previous_response_id": ask.previous_id,
                "reasoning": {"effort": None, "summary": None}, "store": ask.store,
                "temperature": self.sampling[0], "text": {"format": {
                    "type": "json_object" if ask.parsed.json_object else "text"}},
                "tool_choice": "auto", "tools": [], "top_p": self.sampling[1],
                "top_logprobs": ask.parsed.top_logprobs,
                "truncation": "disabled", "metadata": ask.metadata,
                "usage": usage(summary) if summary is not None else None}
        if summary is not None:
            body["completed_at"] = int(time.time())
            body["bidaw"] = extension(summary)
        return body

    def event(self, kind: str, **fields) -> dict:
        out = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return out

    def opening(self) -> list[dict]:
        """The events before the first text delta."""
        where = {"item_id": self.message_id, "output_index": 0, "content_index": 0}
        return [self.event("response.created", response=self.response()),
                self.event("response.in_progress", response=self.response()),
                self.event("response.output_item.added", output_index=0,
                           item=self.message("", "in_progress")),
                self.event("response.content_part.added", **where,
                           part={"type": "output_text", "text": "", "annotations": [],
                                 "logprobs": []})]

    def delta(self, text: str, steps=()) -> dict:
        """`steps`: the logprobs of the tokens whose text this delta carries."""
        return self.event("response.output_text.delta", item_id=self.message_id,
                          output_index=0, content_index=0, delta=text,
                          logprobs=self.logprobs(steps))

    def closing(self, text: str, summary, body: dict) -> list[dict]:
        """The events after the last delta; `body` is the finished response object."""
        where = {"item_id": self.message_id, "output_index": 0, "content_index": 0}
        item = body["output"][0]
        done = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return [self.event("response.output_text.done", **where, text=text,
                           logprobs=item["content"][0]["logprobs"]),
                self.event("response.content_part.done", **where, part=item["content"][0]),
                self.event("response.output_item.done", output_index=0, item=item),
                self.event(done, response=body)]
