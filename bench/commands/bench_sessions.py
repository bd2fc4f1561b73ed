"""`bidaw bench sessions`: what recognising conversations by their content buys and costs.

One run, side by side: the same multi-turn workload (conversations interleaved turn by turn, as
multi-turn benchmark clients send them, greedy) through a real deployment's gateway, once with
X-Session-Id and once without any session id; per mode the prompt tokens reused from stored KV
and how the sessions were found. Then the recognition overhead per turn (hashing the history,
the index lookup, recording the answer) with `--index-size` conversations already stored.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from collections import Counter

QUESTIONS = ["Name a country in Europe.", "What is its capital?", "Name a famous dish from it.",
             "How is that dish made?", "What drink goes with it?", "Thank you."]


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "sessions", help="KV reused with vs without session ids; recognition cost per turn",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--conversations", type=int, default=4, help="conversations per mode")
    p.add_argument("--turns", type=int, default=4, help=f"turns per conversation (at most "
                   f"{len(QUESTIONS)})")
    p.add_argument("--max-tokens", type=int, default=12, help="answer length cap (greedy)")
    p.add_argument("--index-size", type=int, default=100_000,
                   help="conversations stored in the index while its overhead is timed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _turn(conn, messages: list[dict], session: str | None, max_tokens: int) -> dict:
    headers = {"Content-Type": "application/json", **({"X-Session-Id": session} if session
                                                      else {})}
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": "smollm2-135m", "messages": messages, "max_tokens": max_tokens,
        "temperature": 0}), headers)
    reply = conn.getresponse()
    body = json.loads(reply.read())
    if reply.status != 200:
        raise RuntimeError(f"gateway answered {reply.status}: {body}")
    return {"text": body["choices"][0]["message"]["content"], "usage": body["usage"],
            "recognised": reply.getheader("x-bidaw-session-recognised")}


def _workload(port: int, named: bool, args) -> dict:
    """Every conversation's turns, interleaved; totals of the turns after the first."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    mode = "named" if named else "plain"
    # The same conversations in both modes (named sessions are not in the index: no overlap).
    chats = [[{"role": "system", "content": f"You are travel guide number {c}."}]
             for c in range(args.conversations)]
    prompt = cached = 0
    how: Counter = Counter()
    for t in range(args.turns):
        for c, messages in enumerate(chats):
            messages.append({"role": "user", "content": QUESTIONS[t]})
            got = _turn(conn, messages, f"bench-{mode}-{c}" if named else None, args.max_tokens)
            messages.append({"role": "assistant", "content": got["text"]})
            how[got["recognised"]] += 1
            if t > 0:
                prompt += got["usage"]["prompt_tokens"]
                cached += got["usage"]["prompt_tokens_details"]["cached_tokens"]
    conn.close()
    return {"prompt_tokens": prompt, "cached_tokens": cached,
            "reused": round(cached / prompt, 4) if prompt else 0.0, "recognised": dict(how)}


def _overhead(size: int, turns: int = 2000) -> dict:
    """Microseconds per turn for hashing + lookup and for recording, `size` conversations
    (4 turns each: 9 prefix keys) stored."""
    from scheduler.conversation_keys import next_key, prefix_keys
    from scheduler.conversations import ConversationIndex

    def history(i: int, n: int) -> list[tuple[str, str]]:
        roles = ["user", "assistant"] * n
        return [("system", "You are a travel guide.")] + [
            (roles[k], f"{roles[k]} message {k} of conversation {i}: " + "words " * 20)
            for k in range(2 * n)]

    index = ConversationIndex(max_keys=max(1_000_000, 10 * size), ttl_s=1e9)
    names = iter(range(10 ** 9))
    fill_start = time.perf_counter()
    for i in range(size):
        m = index.resolve(prefix_keys("bench", history(i, 3) + [("user", "q")]),
                          lambda: f"s{next(names)}", 0.0)
        index.record(m.session, prefix_keys("bench", history(i, 4)), 0.0)
    fill_s = time.perf_counter() - fill_start
    lookup, record = [], []
    for n in range(turns):  # continue stored conversations, then a few brand new ones
        i = n % size if n % 10 else size + n
        messages = history(i, 4) + [("user", f"one more question {n}")]
        start = time.perf_counter()
        keys = prefix_keys("bench", messages)
        match = index.resolve(keys, lambda: f"s{next(names)}", 1.0)
        mid = time.perf_counter()
        index.record(match.session, keys + [next_key(keys[-1], "assistant", "an answer")], 1.0)
        lookup.append(mid - start)
        record.append(time.perf_counter() - mid)
    total = [a + b for a, b in zip(lookup, record)]
    return {"index_conversations": len(index), "index_keys": index.keys_held,
            "fill_s": round(fill_s, 2),
            "lookup_us_p50": round(statistics.median(lookup) * 1e6, 1),
            "record_us_p50": round(statistics.median(record) * 1e6, 1),
            "per_turn_us_p50": round(statistics.median(total) * 1e6, 1),
            "per_turn_us_p99": round(sorted(total)[int(0.99 * len(total))] * 1e6, 1)}


def run(args: argparse.Namespace) -> int:
    import tempfile

    from services.launcher import LocalDeployment

    if not 1 <= args.turns <= len(QUESTIONS) or args.conversations < 1:
        print(f"--turns must be 1..{len(QUESTIONS)} and --conversations at least 1",
              file=sys.stderr)
        return 2
    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    say("starting a deployment ...")
    with tempfile.TemporaryDirectory(prefix="bidaw-bench-sessions-") as tmp:
        with LocalDeployment(data_dir=tmp, default_max_tokens=args.max_tokens) as dep:
            result = {"conversations": args.conversations, "turns": args.turns,
                      "max_tokens": args.max_tokens}
            for named in (True, False):
                say(f"{args.conversations} x {args.turns} turns "
                    f"{'with' if named else 'without'} session ids ...")
                result["with_ids" if named else "without_ids"] = _workload(
                    dep.gateway_port, named, args)
    say(f"timing recognition with {args.index_size} conversations stored ...")
    result["overhead"] = _overhead(args.index_size)
    if args.json:
        print(json.dumps(result))
        return 0
    for key, label in (("with_ids", "with session ids"), ("without_ids", "without")):
        r = result[key]
        print(f"{label:17} turns 2..{args.turns}: {r['cached_tokens']}/{r['prompt_tokens']} "
              f"prompt tokens reused ({r['reused']:.1%}); sessions found: {r['recognised']}")
    o = result["overhead"]
    print(f"recognition at {o['index_conversations']} conversations ({o['index_keys']} keys): "
          f"{o['per_turn_us_p50']:.1f} us per turn p50, {o['per_turn_us_p99']:.1f} us p99 "
          f"(lookup {o['lookup_us_p50']:.1f} + record {o['record_us_p50']:.1f})")
    return 0
