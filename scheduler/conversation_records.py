"""What the conversation index (conversations.py) holds per session, and what it answers."""
from __future__ import annotations

from dataclasses import dataclass, field

CONTENT, REVISED, BRANCH, NEW = "content", "revised", "branch", "new"


@dataclass
class SessionEntry:
    """One session in the index."""
    path: list[bytes] = field(default_factory=list)  # prefix keys it recorded; path[-1]: head
    in_flight: bool = False
    touched: float = 0.0
    parent: str = ""  # a branch: the session it shares path[:shared] with
    shared: int = 0
    boundary: bytes = b""  # a chunked history: the key of its last chunk boundary
    length: int = -1  # a chunked history's recorded length (-1: messages)
    named: bool = False  # its client names it: a parent for branches, never continued
    prompt: Prompt | None = None  # its last turn's prompt (None: none apart from its head)
    extent: int = 0  # the recorded history's messages (chunked: units)


@dataclass(frozen=True)
class Prompt:
    """A recorded turn's prompt: its key (chunked: `head(length)`), and for a chunked history
    its last chunk boundary's key and its length. `trims`: chat whose last message is the
    user's, the keys of the prompt with that message cut at each paragraph break (its last
    few): the history a client sends back having dropped what it appended to the question (a
    reminder, aider's format rules) before it goes on."""
    key: bytes
    boundary: bytes = b""
    length: int = -1
    trims: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Match:
    recognised: str  # CONTENT, REVISED, BRANCH or NEW
    session: str  # the session the turn runs in
    parent: str = ""  # BRANCH: the session whose KV holds the common prefix


@dataclass(frozen=True)
class Recorded:
    """A recorded session, as `restore` links it again."""
    session: str
    path: tuple[bytes, ...]  # its prefix keys after k_0; the last is its head
    boundary: bytes = b""  # a chunked history: its last chunk boundary's key
    length: int = -1  # a chunked history's length in units (-1: messages)
    parent: str = ""  # a branch: the session it shares path[:shared] with
    shared: int = 0
    named: bool = False
    prompt: Prompt | None = None
    extent: int = 0
