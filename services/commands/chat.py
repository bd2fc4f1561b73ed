"""`bidaw chat`: talk to a running deployment, multi-turn, one session."""
from __future__ import annotations

import json
import sys
import uuid


def register(sub, groups) -> None:
    p = sub.add_parser("chat", help="talk to a running deployment (one session, many turns)")
    p.add_argument("--target", default="127.0.0.1:50052", help="scheduler address")
    p.add_argument("--session", default="", help="session id (default: a new random one)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--message", "-m", action="append", default=[],
                   help="a user message; repeat for several turns (default: read stdin lines)")
    p.add_argument("--max-tokens", type=int, default=256, help="answer length limit")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    p.add_argument("--json", action="store_true", help="one JSON object per turn")
    from services.tls import add_client_args

    add_client_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import grpc

    from services.chat_client import ChatClient, Conversation
    from services.tls import configure_client

    configure_client(args, "chat")
    conv = Conversation(ChatClient(args.target), args.session or f"chat-{uuid.uuid4().hex[:8]}",
                        args.system)
    interactive = not args.message and sys.stdin.isatty()
    lines = args.message or sys.stdin
    if interactive:
        print(f"session {conv.session_id}; empty line or Ctrl-D to quit", file=sys.stderr)
    for line in lines:
        text = line.strip()
        if not text:
            if interactive:
                break
            continue
        stream = None if args.json else (lambda t: print(t, end="", flush=True))
        try:
            result = conv.say(text, max_tokens=args.max_tokens, temperature=args.temperature,
                              on_text=stream)
        except grpc.RpcError as exc:
            print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
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
    return 0
