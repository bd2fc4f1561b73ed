"""`bidaw demo` (what `make run` runs): start the embedded deployment, play a scripted
three-turn conversation, print each answer with the tier its KV came from, then stop."""
from __future__ import annotations

from services.runtime.arg_types import positive_int

SCRIPT = [
    "What is the capital of France? Answer in one sentence.",
    "And what is a famous museum there?",
    "Name one painting that hangs in it.",
]


def register(sub, groups) -> None:
    p = sub.add_parser("demo", help="start, chat three turns, stop (what `make run` does)")
    p.add_argument("--data-dir", default="", help="where the SSD tier goes (default: temp dir)")
    p.add_argument("--dram-bytes", default="3MiB",
                   help="DRAM tier, small so that the third turn's KV comes from SSD")
    p.add_argument("--max-tokens", type=positive_int, default=48, help="answer length limit")
    p.add_argument("--model", default="smollm2-135m", help="model to serve")
    p.set_defaults(func=run)


def run(args) -> int:
    import tempfile

    from services.client.chat_client import ChatClient, Conversation
    from services.launch.launcher import LocalDeployment

    with tempfile.TemporaryDirectory(prefix="bidaw-demo-") as tmp:
        dep = LocalDeployment(data_dir=args.data_dir or tmp, dram_bytes=args.dram_bytes,
                              model=args.model, default_max_tokens=args.max_tokens)
        print("starting KV store, compute worker (Ray), scheduler, gateway ...", flush=True)
        with dep:
            conv = Conversation(ChatClient(dep.scheduler_target), "demo")
            for i, text in enumerate(SCRIPT, 1):
                print(f"\nturn {i} user: {text}\nturn {i} assistant: ", end="", flush=True)
                result = conv.say(text, max_tokens=args.max_tokens,
                                  on_text=lambda t: print(t, end="", flush=True))
                s = result.summary
                print(f"\n  [KV from {result.tier}: {s.cached_tokens} of {s.prompt_tokens} "
                      f"prompt tokens reused, {s.prompt_tokens - s.cached_tokens} prefilled, "
                      f"TTFT {s.ttft_s * 1000:.0f} ms]", flush=True)
            print("\nstopping ...", flush=True)
    return 0
