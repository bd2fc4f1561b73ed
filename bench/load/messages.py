"""Seeded user messages: the same seed gives the same conversations on every run."""
from __future__ import annotations

import random

_TOPICS = ("rivers", "bridges", "tea", "volcanoes", "trains", "bees", "glaciers", "maps",
           "clocks", "lighthouses", "gardens", "comets", "bread", "whales", "deserts", "chess",
           "ink", "salt", "wind", "copper")
_ASKS = ("Tell me one fact about {a}.", "How are {a} and {b} alike?",
         "Write a short line about {a}.", "Why do people like {a}?",
         "Name something {a} and {b} share.", "Explain {a} to a child.",
         "What is surprising about {a}?", "Compare {a} with {b} in a sentence.")


def user_message(seed: int, session: str, turn: int) -> str:
    rng = random.Random(f"{seed}/{session}/{turn}")
    a, b = rng.sample(_TOPICS, 2)
    return rng.choice(_ASKS).format(a=a, b=b)
