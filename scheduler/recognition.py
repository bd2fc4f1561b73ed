"""Which session a turn runs in: the one its client named, or the one its history continues.

The scheduler's side of the conversation index (conversations.py): a turn whose session_id is
empty is matched by the keys of its history (conversation_keys.py: its messages, its raw text
prompt or its token ids); the first event of its answer says which session it ran in and how it
was found; when it finishes, its history and the answer exactly as relayed to the client (text;
for token ids, the generated ids) are recorded (and journaled, conversation_journal.py), so the
client's next turn, which resends them with more appended, is recognised. A turn whose client
names its session is recorded too, as a named session: other turns may read a common beginning
from its KV, and while it holds no KV of its own it may read one from another session (LMCache's
multi-round benchmark names every user, who all begin with one system prompt).
"""
from __future__ import annotations

import time
import uuid
from typing import Callable, Iterator

from services.runtime import metrics
from services.runtime.gen import common_pb2

from scheduler.conversation_journal import ConversationJournal
from scheduler.conversation_keys import ChunkedHistory, MessageHistory
from scheduler.conversations import NEW, ConversationIndex

ID = "id"


def new_session_id(tenant: str) -> str:
    return f"{tenant}/c-{uuid.uuid4().hex}" if tenant else f"c-{uuid.uuid4().hex}"


class RecognisedTurn:
    """One turn with its session decided; `relay` passes its events through."""

    def __init__(self, request: common_pb2.TurnRequest, recognised: str,
                 index: ConversationIndex | None = None,
                 history: MessageHistory | ChunkedHistory | None = None,
                 record: bool = True, clock: Callable[[], float] = time.monotonic,
                 journal: ConversationJournal | None = None):
        self.request = request
        self.recognised = recognised
        self._index = index
        self._journal = journal
        self._history = history  # None: the index does not track this turn
        self._record = record and history is not None
        self._named = recognised == ID
        self._clock = clock

    @property
    def session_id(self) -> str:
        return self.request.session_id

    def relay(self, events: Iterator[common_pb2.TurnEvent]) -> Iterator[common_pb2.TurnEvent]:
        text: list[str] = []
        ids: list[int] = []
        recorded = prefilled = False
        try:
            for n, event in enumerate(events):
                if n == 0:
                    event.session_id, event.recognised = self.session_id, self.recognised
                prefilled = True  # a worker's first event comes once the prompt is computed
                text.append(event.text)
                ids.extend(event.token_ids)
                if event.HasField("summary") and self._record:
                    self._keep(*self._history.after("".join(text), ids), answered=True)
                    recorded = True
                yield event
        finally:
            if self._history is not None and not recorded:
                if prefilled and self._record:  # stopped after its prefill: the worker kept
                    self._keep(*self._history.now())  # the prompt's KV (turn_runner.py)
                else:
                    self._index.abandon(self.session_id)

    def _keep(self, keys: list[bytes], length: int, answered: bool = False) -> None:
        """Record the history (with the answer, or a stopped turn's prompt alone) and the
        prompt; `extent` as `resolve` compares it: messages (an answer is one more), or units."""
        history = self._history
        extent = length if length >= 0 else history.extent + answered
        recorded = self._index.record(self.session_id, keys, self._clock(), length, self._named,
                                      history.prompt(), extent)
        if self._journal is not None:
            self._journal.append(recorded, self._index)


class Recognition:
    def __init__(self, index: ConversationIndex | None, alive: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic,
                 journal: ConversationJournal | None = None):
        """`index` None: recognition off (every unnamed turn is a new session).
        `alive(session)`: False when the store is known to hold no KV for it. `journal`: the
        index kept on disk across restarts (loaded by the caller)."""
        self.index = index
        self.alive = alive
        self.clock = clock
        self.journal = journal

    def resolve(self, request: common_pb2.TurnRequest) -> RecognisedTurn:
        turn = common_pb2.TurnRequest()
        turn.CopyFrom(request)
        turn.parent_session_id = ""  # only we name a parent: a client's could be anyone's KV
        history = self._history(request)
        # A continued final message or no generation prompt: the answer is not a new message,
        # so there is no head to record (the session still counts as in use until it ends).
        plain = not (request.continue_final_message or request.no_generation_prompt)
        if request.session_id:
            if self.index is None or history is None:
                return self._count(RecognisedTurn(turn, ID))
            if not self.alive(turn.session_id):  # no KV of its own (yet): read a beginning?
                turn.parent_session_id = self.index.branch_source(
                    history.keys, turn.session_id, self.clock(), self.alive)
            return self._count(RecognisedTurn(turn, ID, self.index, history, plain,
                                              self.clock, self.journal))
        if self.index is None or history is None:
            turn.session_id = new_session_id(request.tenant)
            return self._count(RecognisedTurn(turn, NEW))
        match = self.index.resolve(history.keys, lambda: new_session_id(request.tenant),
                                   self.clock(), self.alive, history.head, history.extent)
        turn.session_id, turn.parent_session_id = match.session, match.parent
        return self._count(RecognisedTurn(turn, match.recognised, self.index,
                                          history, plain, self.clock, self.journal))

    def sessions_under(self, prefix: str) -> list[str]:
        return [] if self.index is None else self.index.sessions_under(prefix)

    def end(self, session: str) -> bool:
        """`session` ended: the index (and its journal) forget it; whether it was known."""
        if self.index is None or not self.index.forget(session):
            return False
        if self.journal is not None:
            self.journal.ended(session, self.index)
        return True

    @staticmethod
    def _history(request: common_pb2.TurnRequest) -> MessageHistory | ChunkedHistory | None:
        salt = request.cache_salt
        if request.messages:
            return MessageHistory(request.tenant,
                                  ((m.role, m.content) for m in request.messages), salt)
        if request.raw_prompt:
            return ChunkedHistory(request.tenant, request.raw_prompt, salt=salt)
        if request.prompt_token_ids:
            return ChunkedHistory(request.tenant, list(request.prompt_token_ids), salt=salt)
        return None

    @staticmethod
    def _count(turn: RecognisedTurn) -> RecognisedTurn:
        metrics.RECOGNISED.labels(turn.recognised).inc()
        return turn
