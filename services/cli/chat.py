"""`bidaw chat`: talk to a running deployment, multi-turn, one session: over the gateway's
OpenAI-compatible HTTP API (an http(s):// URL) or the scheduler's gRPC API (HOST:PORT)."""
from __future__ import annotations

import json
import os
import sys
import uuid

from services.runtime.arg_types import non_negative, positive_int


def register(sub, groups) -> None:
    from services.client.chat_client import TARGET_HELP

    p = sub.add_parser("chat", help="talk to a running deployment (one session, many turns)")
    # The gateway `bidaw up` serves: the public API, which needs no cluster token.
    p.add_argument("--target", default="http://127.0.0.1:8000/v1", help=TARGET_HELP)
    p.add_argument("--api-key", default=os.environ.get("BIDAW_API_KEY", ""),
                   help="gateway API key, over HTTP (default: env BIDAW_API_KEY)")
    p.add_argument("--model", default="", help="model id sent to the gateway (default: the one "
                   "it serves)")
    p.add_argument("--session", default="", help="session id (default: a new random one)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--message", "-m", action="append", default=[],
                   help="a user message; repeat for several turns (default: read stdin lines)")
    p.add_argument("--max-tokens", type=positive_int, default=256, help="answer length limit")
    p.add_argument("--temperature", type=non_negative, default=0.0, help="0 is greedy")
    p.add_argument("--end", action="store_true", help="end the session after the last "
                   "message: the deployment frees its KV (DELETE /v1/sessions/{id})")
    p.add_argument("--no-prepare", action="store_true", help="on a terminal, do not tell the "
                   "deployment when you start typing (it then brings the session's KV from "
                   "SSD back to DRAM meanwhile: POST /v1/sessions/{id}/prepare)")
    p.add_argument("--json", action="store_true", help="one JSON object per turn")
    from services.runtime.tls import add_client_args

    add_client_args(p)
    p.set_defaults(func=run)


def _client(args):
    from services.client.chat_client import ChatClient, target_kind
    from services.client.http_chat_client import HttpChatClient
    from services.runtime.tls import configure_client

    if target_kind(args.target) == "http":
        return HttpChatClient(args.target, args.api_key, args.model)
    configure_client(args, "chat")
    return ChatClient(args.target)


def run(args) -> int:
    import grpc

    from services.client.chat_client import Conversation, TargetError, grpc_hint
    from services.client.http_chat_client import HttpError

    try:
        client = _client(args)
    except TargetError as exc:
        print(f"bidaw chat: {exc}", file=sys.stderr)
        return 2
    conv = Conversation(client, args.session or f"chat-{uuid.uuid4().hex[:8]}", args.system)
    interactive = not args.message and sys.stdin.isatty()
    lines = args.message or (_typed(client, conv, args) if interactive else sys.stdin)
    if interactive:
        print(f"session {conv.session_id}; empty line or Ctrl-D to quit", file=sys.stderr)
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            if interactive:
                break
            continue
        problem = _not_text(text)
        if problem:  # bytes the terminal or pipe could not decode: said, and nothing sent
            where = f"message {n}" if args.message else f"input line {n}"
            print(f"bidaw chat: {where} is not UTF-8 text ({problem}); nothing of it was sent",
                  file=sys.stderr)
            return 2
        stream = None if args.json else (lambda t: print(t, end="", flush=True))
        try:
            result = conv.say(text, max_tokens=args.max_tokens, temperature=args.temperature,
                              on_text=stream)
        except grpc.RpcError as exc:
            print(f"error: {exc.code().name}: {grpc_hint(args.target, exc.details() or '')}",
                  file=sys.stderr)
            return 1
        except HttpError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:  # the gateway URL does not answer
            print(f"error: {args.target}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
            return 1
        s = result.summary
        if args.json:
            print(json.dumps({"session": conv.session_id, "answer": result.text,
                              "kv_tier": result.tier, "cached_tokens": s.cached_tokens,
                              "prompt_tokens": s.prompt_tokens,
                              "completion_tokens": s.completion_tokens, "ttft_s": s.ttft_s,
                              "latency_s": s.latency_s}), flush=True)
        else:
            print(f"\n  [KV from {result.tier}, {s.cached_tokens}/{s.prompt_tokens} prompt "
                  f"tokens reused, TTFT {s.ttft_s * 1000:.0f} ms]", flush=True)
    if args.end:
        return _end(client, conv.session_id, args.target)
    return 0


def _typed(client, conv, args):
    """The terminal's lines; once the session has had a turn, each first key says the next
    one is coming, unless --no-prepare."""
    from services.cli.typing_signal import typed_lines

    def typing() -> None:
        if conv.messages and conv.messages[-1]["role"] == "assistant" and not args.no_prepare:
            client.prepare(conv.session_id)

    return typed_lines(typing)


def _end(client, session_id: str, target: str) -> int:
    """End the session; 1 with a message if the call failed."""
    import grpc

    from services.client.chat_client import grpc_hint
    from services.client.http_chat_client import HttpError

    try:
        known = client.end(session_id)
    except grpc.RpcError as exc:
        print(f"error: {exc.code().name}: {grpc_hint(target, exc.details() or '')}",
              file=sys.stderr)
        return 1
    except (HttpError, OSError) as exc:
        print(f"error: ending session {session_id}: {exc}", file=sys.stderr)
        return 1
    print(f"session {session_id} {'ended: its KV is freed' if known else 'was not known'}",
          file=sys.stderr)
    return 0


def _not_text(text: str) -> str:
    """Why `text` cannot be sent (stdin and argv keep undecodable bytes as lone surrogates),
    or ''."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"character {exc.start + 1}"
    return ""
