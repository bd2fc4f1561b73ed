"""The gateway's asynchronous client of the Scheduler API (SubmitTurn, sessions, stored
responses, tokenizer, health)."""
from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace

from services.runtime import tracing
from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import aio_channel
from services.runtime.tracing_grpc import finish, rpc_attributes

SUBMIT_TURN = "/bidaw.v1.Scheduler/SubmitTurn"


class TurnCall:
    """One SubmitTurn stream; iterate it for TurnEvents, `cancel()` if the client went away.

    Its CLIENT span is not made current: the handler task may be torn down mid-stream, and a
    current span left attached to a dead task's context would leak into the next request.
    """

    def __init__(self, stub, request: common_pb2.TurnRequest, timeout: float):
        self._span = None
        metadata = None
        if tracing.enabled():
            tracer = trace.get_tracer("bidaw.gateway")
            self._span = tracer.start_span(SUBMIT_TURN.lstrip("/"), kind=trace.SpanKind.CLIENT,
                                           attributes=rpc_attributes(SUBMIT_TURN))
            carrier: dict[str, str] = {}
            from opentelemetry import propagate

            propagate.inject(carrier, context=trace.set_span_in_context(self._span))
            metadata = tuple(carrier.items())
        self._call = stub.SubmitTurn(request, timeout=timeout, metadata=metadata)
        self._iter = self._call.__aiter__()

    def __aiter__(self):
        return self

    async def __anext__(self) -> common_pb2.TurnEvent:
        try:
            return await self._iter.__anext__()
        except StopAsyncIteration:
            self._end(grpc.StatusCode.OK, None)
            raise
        except grpc.RpcError as exc:
            self._end(exc.code(), exc.details())
            raise

    def cancel(self) -> None:
        if not self._call.done():
            self._call.cancel()
        self._end(grpc.StatusCode.CANCELLED, "the HTTP client went away")

    def _end(self, code, details) -> None:
        if self._span is not None:
            span, self._span = self._span, None
            finish(span, code, details)


class Backend:
    def __init__(self, target: str, timeout: float):
        self.target = target
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None  # opened on first use, in the serving loop

    def _open(self) -> grpc.aio.Channel:
        """The channel, made on first use: a grpc.aio channel belongs to the event loop that is
        running when it is made, so a Gateway may be built before its loop starts."""
        if self._channel is None:
            self._channel = aio_channel(self.target)  # TLS when `--tls-*` set it
            self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
            self._health = health_pb2_grpc.HealthStub(self._channel)
        return self._channel

    def submit(self, request: common_pb2.TurnRequest) -> TurnCall:
        self._open()
        return TurnCall(self._stub, request, self.timeout)

    async def healthy(self, timeout: float = 2.0) -> bool:
        self._open()
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def stats(self, timeout: float = 2.0) -> scheduler_pb2.SchedulerStats | None:
        self._open()
        try:
            return await self._stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=timeout)
        except grpc.RpcError:
            return None

    async def end_session(self, tenant: str, session_id: str, timeout: float) -> bool:
        """The scheduler ends the session (see SessionsApi); whether anything knew it."""
        self._open()
        reply = await self._stub.EndSession(
            scheduler_pb2.EndSessionRequest(tenant=tenant, session_id=session_id),
            timeout=timeout)
        return reply.known

    async def flush_sessions(self, tenant: str, timeout: float
                             ) -> scheduler_pb2.FlushSessionsReply:
        """The scheduler ends every session of the tenant that has no turn running."""
        self._open()
        return await self._stub.FlushSessions(
            scheduler_pb2.FlushSessionsRequest(tenant=tenant), timeout=timeout)

    async def prepare_session(self, tenant: str, session_id: str,
                              timeout: float) -> scheduler_pb2.PrepareSessionReply:
        """The scheduler starts promoting the session's KV to DRAM (see SessionsApi)."""
        self._open()
        return await self._stub.PrepareSession(
            scheduler_pb2.PrepareSessionRequest(tenant=tenant, session_id=session_id),
            timeout=timeout)

    async def put_response(self, record: scheduler_pb2.StoredResponse,
                           timeout: float = 10.0) -> bool:
        """The scheduler keeps a Responses API response (responses_api.py); whether it did."""
        self._open()
        return (await self._stub.PutResponse(record, timeout=timeout)).stored

    async def get_response(self, tenant: str, response_id: str, chain: bool = False,
                           timeout: float = 10.0) -> scheduler_pb2.GetResponseReply:
        """A stored response, or (`chain`) the conversation it ends; `missing_id` if not."""
        self._open()
        return await self._stub.GetResponse(scheduler_pb2.GetResponseRequest(
            tenant=tenant, id=response_id, chain=chain), timeout=timeout)

    async def delete_response(self, tenant: str, response_id: str,
                              timeout: float = 10.0) -> bool:
        self._open()
        return (await self._stub.DeleteResponse(scheduler_pb2.GetResponseRequest(
            tenant=tenant, id=response_id), timeout=timeout)).deleted

    async def tokenize(self, request: common_pb2.TokenizeRequest,
                       timeout: float) -> common_pb2.TokenizeReply:
        """A worker's tokenizer, through the scheduler (tokenizer_api.py)."""
        self._open()
        return await self._stub.Tokenize(request, timeout=timeout)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
