"""The Scheduler gRPC service: a thin servicer mapping each RPC onto the scheduler's parts.

SubmitTurn validates the turn (validation.py), finds its session (recognition.py), holds that
session's lock — turns of one session run one at a time, so a session's KV is never written by
two turns at once — and relays it (relay.py), waiting in its handler thread until the dispatcher
core (dispatcher.py) hands it a worker. EndSession takes the same lock (a running turn finishes
and saves its KV first), then the index forgets the session and its store shard frees its KV.
PrepareSession takes no lock (a running turn must not delay it): it asks the session's store
shard to promote its KV from SSD to DRAM and answers at once. Register/Deregister go to
members.py; Stats reads all; Tokenize goes to a worker (tokenize_relay.py).
Put/Get/DeleteResponse keep the Responses API's stored responses (response_store.py) for every
gateway replica; with `--state-dir` both the conversation index and the stored responses are
journaled there (conversation_journal.py, response_journal.py), so a restart keeps them.
"""
from __future__ import annotations

import time

import grpc
from google.protobuf.message import DecodeError

from services.runtime import metrics
from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import RECONNECT_BACKOFF_MS

from scheduler.config import SchedulerConfig
from scheduler.conversation_journal import ConversationJournal
from scheduler.conversations import ConversationIndex
from scheduler.dispatcher import Dispatcher
from scheduler.members import Members, Refused
from scheduler.policy import QueueConfig
from scheduler.recognition import Recognition
from scheduler.relay import Relay
from scheduler.response_journal import ResponseJournal
from scheduler.response_store import MissingResponse, ResponseStore, StoredResponse
from scheduler.restore_chooser import LiveRestoreChooser
from scheduler.session_locks import SessionLocks
from scheduler.tokenize_relay import relay_tokenize
from scheduler.validation import (response_problem, session_problem, tenant_problem,
                                  turn_problem)
from scheduler.workers import WorkerPool

END_CONFIRM_S = 5.0  # how long an EndSession waits for the store to say the session's KV is gone
# A member dials a restarted scheduler at most this long after its last try (grpc_util's longest
# reconnect backoff), and beats twice a heartbeat: all have registered again within the sum.
REJOIN_S = RECONNECT_BACKOFF_MS[1] / 1000
# The store's Promote answers the tier at arrival -> (the outcome counted, the tier after it).
PREPARED = {common_pb2.TIER_SSD: ("promoted", common_pb2.TIER_LOADING),
            common_pb2.TIER_LOADING: ("in_dram", common_pb2.TIER_LOADING),
            common_pb2.TIER_DRAM: ("in_dram", common_pb2.TIER_DRAM)}


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, config: SchedulerConfig, pool: WorkerPool):
        self.config = config
        self.pool = pool
        queue = QueueConfig(config.policy, config.max_loads, config.prefetch_window,
                            config.ssd_aware).build()
        restore = (LiveRestoreChooser(config.restore_stall_weight,
                                      suffix_loads=config.restore_suffix_loads)
                   if config.restore_choice else None)
        self.dispatcher = Dispatcher(queue, pool, config.scheduler_id, config.max_queue, restore)
        self.stores = self.dispatcher.stores
        self.members = Members(config, pool, self.stores, on_worker_joined=self.dispatcher.wake)
        self.relay = Relay(config.scheduler_id, self.dispatcher)
        index = (ConversationIndex(config.conversation_keys, config.conversation_ttl_s)
                 if config.conversation_keys > 0 else None)
        self.journal = None  # the index on disk, so a restart keeps it
        if index is not None and config.state_dir:
            self.journal = _loaded(ConversationJournal(config.state_dir), index, config)
        self.recognition = Recognition(  # turns without a session id: found by their history
            index, journal=self.journal,
            alive=lambda s: not self.stores.all_connected() or self.stores.location(s) is not None)
        self._session_locks = SessionLocks()  # entries live only while a turn needs one
        self.responses = ResponseStore(config.responses_store_bytes, config.responses_ttl_s)
        self.response_journal = (  # the stored responses on disk, so a restart keeps them
            _loaded(ResponseJournal(config.state_dir, _restored), self.responses, config)
            if config.state_dir else None)
        # Members that register (no --store or no --workers list) come back one by one after a
        # restart; until then the ring is partial: a session would hash to a shard that does not
        # hold its KV (recomputed; and a conversation sent without an id taken for a new one),
        # or no worker would be there yet (refused). Turns wait for them, this long at most.
        self._settled_at = 0.0
        self._settle_s = (config.heartbeat_s + REJOIN_S
                          if not self.members.static_stores or not config.workers else 0.0)

    def start(self) -> "SchedulerService":
        self._settled_at = time.monotonic() + self._settle_s
        self.members.start()
        self.dispatcher.start(maintain=self.members.maintain)
        return self

    def stop(self) -> None:
        self.dispatcher.stop()
        self.stores.stop()
        for journal in (self.journal, self.response_journal):
            if journal is not None:
                journal.close()

    def SubmitTurn(self, request, context):
        problem = turn_problem(request, self.config.max_tokens_limit)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if self.config.max_tokens_limit and not request.max_tokens and not request.prompt_only:
            request.max_tokens = self.config.max_tokens_limit  # the bound holds for unset too
        self._settle(context)
        arrival = time.monotonic()
        turn = self.recognition.resolve(request)
        with self._session_locks.hold(turn.session_id):
            yield from turn.relay(self.relay.serve(turn.request, context, arrival))

    def EndSession(self, request, context):
        problem = session_problem(request)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        session = request.session_id
        self._settle(context)  # the shards holding its KV must have registered again
        try:
            with self._session_locks.hold(session, context.time_remaining()):
                known = self.recognition.end(session)
                stored = self.stores.holds(session)
                # KV it held is gone before the client hears so: its next turn (a session
                # name used afresh) must not find it (bounded: a store that is down hears later)
                self.stores.session_end(session, min(END_CONFIRM_S, context.time_remaining()
                                                     or END_CONFIRM_S) if stored else 0.0)
                known = stored or known
        except TimeoutError:  # a turn of it is still running: nothing was ended
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                          "a turn of this session is still running")
        metrics.SESSION_ENDS.labels("ended" if known else "unknown").inc()
        return scheduler_pb2.EndSessionReply(known=known)

    def FlushSessions(self, request, context):
        problem = tenant_problem(request.tenant) or ("" if request.tenant else "tenant is empty")
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self._settle(context)
        prefix = request.tenant + "/"
        stored = self.stores.sessions_under(prefix)
        # the KV is gone before the caller hears so, as for EndSession (bounded in all)
        deadline = time.monotonic() + min(END_CONFIRM_S, context.time_remaining() or END_CONFIRM_S)
        ended = busy = 0
        for session in sorted(stored | set(self.recognition.sessions_under(prefix))):
            try:
                with self._session_locks.hold(session, 0.0):
                    self.recognition.end(session)
                    self.stores.session_end(session, max(deadline - time.monotonic(), 0.0)
                                            if session in stored else 0.0)
                    ended += 1
            except TimeoutError:  # a turn of it is running: left as it is
                busy += 1
        metrics.SESSION_ENDS.labels("flushed").inc(ended)
        return scheduler_pb2.FlushSessionsReply(ended=ended, busy=busy)

    def _settle(self, context) -> None:
        """Wait, right after the start, for the members to have registered again."""
        wait = self._settled_at - time.monotonic()
        if wait > 0:
            left = context.time_remaining()
            time.sleep(max(min(wait, left if left is not None else wait), 0.0))

    def PrepareSession(self, request, context):
        problem = session_problem(request)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            was = self.stores.promote_tier(request.session_id,
                                           min(5.0, context.time_remaining() or 5.0),
                                           announced=True)
        except LookupError:  # no store shard: nothing holds its KV
            was = common_pb2.TIER_NONE
        except grpc.RpcError as exc:  # the store refused the id, or did not answer
            code = exc.code()
            context.abort(code if code == grpc.StatusCode.INVALID_ARGUMENT else
                          grpc.StatusCode.UNAVAILABLE, f"the KV store: {exc.details()}")
        outcome, tier = PREPARED.get(was, ("unknown", common_pb2.TIER_NONE))
        metrics.SESSION_PREPARES.labels(outcome).inc()
        return scheduler_pb2.PrepareSessionReply(known=tier != common_pb2.TIER_NONE, tier=tier)

    def Stats(self, request, context):
        lengths = self.dispatcher.lengths()
        return scheduler_pb2.SchedulerStats(
            ready_queue=lengths["ready"], preparing_queue=lengths["waiting"] + lengths["loading"],
            running=self.pool.running(), turns_finished=self.relay.finished,
            turns_failed=self.relay.failed, workers=self.pool.healthy_count(),
            sessions_known=self.stores.sessions_known(),
            awareness_connected=self.stores.all_connected(), policy=self.config.policy,
            turns_rerun=self.relay.rerun, stores=len(self.stores.members()),
            model=self.pool.serving()[0])

    def PutResponse(self, request, context):
        self._valid(context, request.tenant, request.id, request.previous_id)
        record = _record(request)
        stored = self.responses.put(record)
        if stored and self.response_journal is not None:
            self.response_journal.put(record)
        return scheduler_pb2.PutResponseReply(stored=stored)

    def GetResponse(self, request, context):
        self._valid(context, request.tenant, request.id)
        try:
            if request.chain:  # the history only: the conversation's input and answers
                found = [scheduler_pb2.StoredResponse(
                    tenant=r.payload.tenant, id=r.id, previous_id=r.payload.previous_id,
                    messages=r.payload.messages, output=r.payload.output)
                    for r in self.responses.chain(request.tenant, request.id)]
            else:
                record = self.responses.get(request.tenant, request.id)
                if record is None:
                    raise MissingResponse(request.id)
                found = [record.payload]
        except MissingResponse as missing:
            return scheduler_pb2.GetResponseReply(missing_id=missing.response_id)
        return scheduler_pb2.GetResponseReply(responses=found)

    def DeleteResponse(self, request, context):
        self._valid(context, request.tenant, request.id)
        deleted = self.responses.delete(request.tenant, request.id)
        if deleted and self.response_journal is not None:
            self.response_journal.deleted(request.tenant, request.id)
        return scheduler_pb2.DeleteResponseReply(deleted=deleted)

    def Tokenize(self, request, context):
        self._settle(context)  # the workers must have registered again
        return relay_tokenize(self.pool, request, context)

    @staticmethod
    def _valid(context, tenant: str, response_id: str, previous_id: str = "") -> None:
        problem = response_problem(tenant, response_id, previous_id)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)

    # The cluster token was checked before these handlers (services/runtime/cluster_auth.py).
    def Register(self, request, context):
        return self._membership(self.members.register, context, request.kind, request.address,
                                request.model, request.kv_dtype)

    def Deregister(self, request, context):
        return self._membership(self.members.deregister, context, request.kind, request.address)

    @staticmethod
    def _membership(change, context, *args):
        try:
            return change(*args)
        except Refused as refused:
            context.abort(refused.code, refused.details)


def _record(message: scheduler_pb2.StoredResponse) -> StoredResponse:
    return StoredResponse(message.id, message.tenant, message.previous_id or None, message,
                          message.ByteSize())


def _restored(data: bytes) -> StoredResponse:
    """A journaled response, checked as PutResponse checks it (ValueError: a damaged line)."""
    try:
        message = scheduler_pb2.StoredResponse.FromString(data)
    except DecodeError as exc:
        raise ValueError(str(exc)) from None
    if response_problem(message.tenant, message.id, message.previous_id):
        raise ValueError("not a stored response")
    return _record(message)


def _loaded(journal, state, config: SchedulerConfig):
    """`journal` with `state` restored from it."""
    try:
        journal.load(state)
    except OSError as exc:  # not a directory, not writable: say which flag
        raise ValueError(f"--state-dir {config.state_dir}: {exc.strerror or exc}") from None
    return journal
