"""`bidaw bench sessions`: what recognising conversations by their content buys and costs.

One run, side by side: the same multi-turn workload (conversations interleaved turn by turn, as
multi-turn benchmark clients send them, greedy) through a real deployment's gateway, once with
X-Session-Id and once without any session id, by two clients: a chat one (vLLM's multi-turn
style: messages, our answers as assistant content) and a raw-text one (SGLang's bench_multiturn
style: the whole history as one streamed /v1/completions prompt, ignore_eos); per mode the prompt
tokens reused from stored KV and how the sessions were found. Then the recognition overhead per
turn (hashing the history, the index lookup, recording the answer) with `--index-size`
conversations already stored, and for a 100 KB raw history.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from collections import Counter

from services.runtime.arg_types import positive_int

SHARED = ("You are a careful assistant of a travel company. Answer in two sentences, name your "
          "sources when you can, never invent a price, and ask before you book anything. ") * 3
QUESTIONS = ["Name a country in Europe.", "What is its capital?", "Name a famous dish from it.",
             "How is that dish made?", "What drink goes with it?", "Thank you."]


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "sessions", help="KV reused with vs without session ids; recognition cost per turn",
        description=__doc__.split("\n\n")[1])
    p.add_argument("--conversations", type=positive_int, default=4, help="conversations per mode")
    p.add_argument("--turns", type=positive_int, default=4, help=f"turns per conversation (at most "
                   f"{len(QUESTIONS)})")
    p.add_argument("--max-tokens", type=positive_int, default=12, help="answer length cap (greedy)")
    p.add_argument("--index-size", type=positive_int, default=100_000,
                   help="conversations stored in the index while its overhead is timed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _named(session: str | None) -> tuple[dict, dict]:
    """(headers, body fields) of a turn of `session` (None: no id). A named run is salted
    (cache_salt): the runs with and without ids share no KV, each measured on its own."""
    if not session:
        return {"Content-Type": "application/json"}, {}
    return ({"Content-Type": "application/json", "X-Session-Id": session},
            {"cache_salt": "bench-named"})


def _turn(conn, messages: list[dict], session: str | None, max_tokens: int,
          salt: str | None = None) -> dict:
    headers, extra = _named(session)
    extra = {"cache_salt": salt} if salt else extra
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": "smollm2-135m", "messages": messages, "max_tokens": max_tokens,
        "temperature": 0, **extra}), headers)
    reply = conn.getresponse()
    body = json.loads(reply.read())
    if reply.status != 200:
        raise RuntimeError(f"gateway answered {reply.status}: {body}")
    return {"text": body["choices"][0]["message"]["content"], "usage": body["usage"],
            "recognised": reply.getheader("x-bidaw-session-recognised")}


def _complete(conn, prompt: str, session: str | None, max_tokens: int) -> dict:
    """One streamed raw-text turn, read as SGLang's client reads it (text deltas, then usage)."""
    headers, extra = _named(session)
    conn.request("POST", "/v1/completions", json.dumps({
        "model": "smollm2-135m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        **extra}), headers)
    reply = conn.getresponse()
    if reply.status != 200:
        raise RuntimeError(f"gateway answered {reply.status}: {reply.read()[:500]!r}")
    text, usage = [], None
    for line in reply.read().decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            text += [c["text"] for c in chunk.get("choices") or []]
            usage = chunk.get("usage") or usage
    return {"text": "".join(text), "usage": usage,
            "recognised": reply.getheader("x-bidaw-session-recognised")}


def _chat_client(conn, c: int, session: str | None, args):
    """A chat conversation: per turn, send the messages; the answer joins them."""
    messages = [{"role": "system", "content": f"You are travel guide number {c}."}]
    for t in range(args.turns):
        messages.append({"role": "user", "content": QUESTIONS[t]})
        got = _turn(conn, messages, session, args.max_tokens)
        messages.append({"role": "assistant", "content": got["text"]})
        yield got


def _raw_client(conn, c: int, session: str | None, args):
    """SGLang-style: history += generated text; history += next question; send it whole."""
    history = f"You are travel guide number {c}. Answer briefly.\nQ: "
    for t in range(args.turns):
        history += QUESTIONS[t] + "\nA:"
        got = _complete(conn, history, session, args.max_tokens)
        history += got["text"] + "\nQ: "
        yield got


def _shared_client(isolated: bool):
    """Named users whose first messages open with one system prompt (LMCache's multi-round-qa
    layout); `isolated`: a cache_salt per user, so none reads another's KV (as before named
    sessions were branch parents)."""
    def shared_client(conn, c: int, session: str | None, args):
        messages = []
        for t in range(args.turns):
            text = SHARED + f"I am traveller {c}. " + QUESTIONS[0] if not t else QUESTIONS[t]
            messages.append({"role": "user", "content": text})
            got = _turn(conn, messages, session, args.max_tokens,
                        f"bench-own-{c}" if isolated else "bench-shared")
            messages.append({"role": "assistant", "content": got["text"]})
            yield got
    shared_client.__name__ = "isolated_users" if isolated else "shared_users"  # its sessions
    return shared_client


def _workload(port: int, named: bool, args, client=_chat_client) -> dict:
    """Every conversation's turns, interleaved; totals of the turns after the first."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    mode = f"{client.__name__}-{'named' if named else 'plain'}"
    # The same conversations in both modes (the named ones salted: no overlap).
    clients = [client(conn, c, f"bench-{mode}-{c}" if named else None, args)
               for c in range(args.conversations)]
    prompt, cached = [0, 0], [0, 0]  # first turns, later turns
    how: Counter = Counter()
    for t in range(args.turns):
        for conversation in clients:
            got = next(conversation)
            how[got["recognised"]] += 1
            prompt[t > 0] += got["usage"]["prompt_tokens"]
            cached[t > 0] += got["usage"]["prompt_tokens_details"]["cached_tokens"]
    conn.close()
    return {"prompt_tokens": prompt[1], "cached_tokens": cached[1],
            "reused": round(cached[1] / prompt[1], 4) if prompt[1] else 0.0,
            "first_prompt_tokens": prompt[0], "first_cached_tokens": cached[0],
            "recognised": dict(how)}


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


def _raw_overhead(stored: int = 200, turns: int = 200, size: int = 100_000) -> dict:
    """Milliseconds per turn for a `size`-character raw history continuing its session (hash
    it, look up, record prompt + answer), `stored` such histories in the index."""
    from scheduler.conversation_keys import ChunkedHistory
    from scheduler.conversations import ConversationIndex

    base = ("Question and answer about travel in Europe, round after round. " * 2000)[:size]
    index = ConversationIndex(max_keys=10_000_000, ttl_s=1e9)
    names = iter(range(10 ** 9))
    texts = [f"client {i}: " + base for i in range(stored)]
    for i, text in enumerate(texts):
        h = ChunkedHistory("bench", text)
        m = index.resolve(h.keys, lambda: f"s{next(names)}", 0.0, head=h.head)
        keys, length = h.after(" an answer", [])
        index.record(m.session, keys, 0.0, length)
        texts[i] += " an answer"
    per_turn, found = [], Counter()
    for n in range(turns):
        i = n % stored
        start = time.perf_counter()
        h = ChunkedHistory("bench", texts[i] + f" question {n}?")
        m = index.resolve(h.keys, lambda: f"s{next(names)}", 1.0, head=h.head)
        keys, length = h.after(" answer", [])
        index.record(m.session, keys, 1.0, length)
        per_turn.append(time.perf_counter() - start)
        texts[i] = h.units + " answer"
        found[m.recognised] += 1
    return {"history_chars": size, "stored_histories": stored, "index_keys": index.keys_held,
            "recognised": dict(found),
            "per_turn_ms_p50": round(statistics.median(per_turn) * 1e3, 2),
            "per_turn_ms_p99": round(sorted(per_turn)[int(0.99 * len(per_turn))] * 1e3, 2)}


def run(args: argparse.Namespace) -> int:
    import tempfile

    from services.launch.launcher import LocalDeployment

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
            for kind, client in (("", _chat_client), ("raw_", _raw_client)):
                for named in (True, False):
                    say(f"{args.conversations} x {args.turns} {kind or 'chat_'}turns "
                        f"{'with' if named else 'without'} session ids ...")
                    result[f"{kind}{'with' if named else 'without'}_ids"] = _workload(
                        dep.gateway_port, named, args, client)
            for isolated in (True, False):
                say(f"{args.conversations} named users opening with one system prompt, "
                    f"{'each salted apart' if isolated else 'shared'} ...")
                result[f"system_prompt_{'isolated' if isolated else 'shared'}"] = _workload(
                    dep.gateway_port, True, args, _shared_client(isolated))
    say(f"timing recognition with {args.index_size} conversations stored ...")
    result["overhead"] = _overhead(args.index_size)
    say("timing recognition of 100 KB raw histories ...")
    result["raw_overhead"] = _raw_overhead()
    if args.json:
        print(json.dumps(result))
        return 0
    for key, label in (("with_ids", "chat, session ids"), ("without_ids", "chat, none"),
                       ("raw_with_ids", "raw, session ids"), ("raw_without_ids", "raw, none")):
        r = result[key]
        print(f"{label:17} turns 2..{args.turns}: {r['cached_tokens']}/{r['prompt_tokens']} "
              f"prompt tokens reused ({r['reused']:.1%}); sessions found: {r['recognised']}")
    for key in ("system_prompt_isolated", "system_prompt_shared"):
        r = result[key]
        print(f"named users, one system prompt, {key.rsplit('_', 1)[1]:8}: first turns "
              f"{r['first_cached_tokens']}/{r['first_prompt_tokens']} prompt tokens reused, "
              f"turns 2..{args.turns} {r['reused']:.1%}")
    r = result["raw_overhead"]
    print(f"raw history of {r['history_chars'] // 1000} KB, {r['stored_histories']} stored "
          f"({r['index_keys']} keys): {r['per_turn_ms_p50']:.2f} ms per turn p50, "
          f"{r['per_turn_ms_p99']:.2f} ms p99; found: {r['recognised']}")
    o = result["overhead"]
    print(f"recognition at {o['index_conversations']} conversations ({o['index_keys']} keys): "
          f"{o['per_turn_us_p50']:.1f} us per turn p50, {o['per_turn_us_p99']:.1f} us p99 "
          f"(lookup {o['lookup_us_p50']:.1f} + record {o['record_us_p50']:.1f})")
    return 0
