"""The gateway's HTTP application: routes, auth, overload shedding, errors, spans and metrics."""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time

from aiohttp import web
from opentelemetry import propagate

from services.runtime import metrics

from services.runtime import tracing

from services.gateway import turn_note
from services.gateway.admission import FairQueue
from services.gateway.auth import Tenants
from services.gateway.backend import Backend
from services.gateway.completion_batch import Batch, BatchTurns
from services.gateway.config import GatewayConfig
from services.gateway.cors import Cors
from services.gateway.errors import ApiError
from services.gateway.health import HealthCheck
from services.gateway.headers import check_headers
from services.gateway.metrics_site import metrics_response
from services.gateway.native_api import NativeApi
from services.gateway.prompt_size import check_prompt_size
from services.gateway.protocol import check_model, parse_chat, parse_completion
from services.gateway.ratelimit import InFlight, RateLimiter, retry_after_s
from services.gateway.request_body import read_body
from services.gateway.responses import VERSION, Reply, model_card
from services.gateway.responses_api import ResponsesApi
from services.gateway.sessions_api import SessionsApi
from services.gateway.tokenizer_api import TokenizerApi
from services.gateway.turns import ANSWERED, TurnServer
from services.gateway.waiting import Admission, Shed, Slot

log = logging.getLogger("bidaw.gateway")
TURN_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/generate")
CLIENT_CLOSED = 499  # the status counted and logged for a request whose client hung up
# request key: why it was refused, for the access log line (a typed key from aiohttp 3.13 on)
REFUSED = getattr(web, "RequestKey", lambda name, kind: name)("bidaw_refused", str)


async def _trace_header(request: web.Request, response: web.StreamResponse) -> None:
    """x-trace-id on a stream, whose headers leave inside the handler (and its span); plain
    responses are prepared after the middleware's span ended, so _observe sets theirs."""
    trace_id = tracing.current_trace_id()
    if trace_id:
        response.headers["x-trace-id"] = trace_id


def _scheduler_full(exc: ApiError) -> bool:
    """The scheduler refused the turn as full (RESOURCE_EXHAUSTED, errors.from_grpc), before
    it ran: the turn may be submitted again."""
    return exc.status == 429 and exc.code == "overloaded"


class Gateway:
    """State shared by the handlers; `app` is the aiohttp application."""

    def __init__(self, config: GatewayConfig, backend: Backend | None = None):
        self.config = config
        self.tenants = Tenants.from_config(config)
        self.backend = backend or Backend(config.scheduler, config.request_timeout_s)
        self.health_check = HealthCheck(self.backend, config.health_cache_s)
        self.turns = TurnServer(self.backend, config.retry_after_s, config.max_session_id)
        self.batch = BatchTurns(self.backend, config.retry_after_s, config.max_session_id)
        self.in_flight = 0
        self.tenant_rate = RateLimiter(config.tenant_rate, config.tenant_burst)
        self.tenant_in_flight = InFlight(config.tenant_max_in_flight)
        # a turn never waits for a slot longer than it may take at the scheduler
        self.admission = Admission(FairQueue(
            config.max_in_flight, config.max_waiting, config.tenant_max_waiting,
            min(config.max_queue_wait_s, config.request_timeout_s), config.retry_after_s))
        self.draining = False
        self.started = int(time.time())
        self.metrics_port = 0  # of --metrics-listen, once serving
        self.cors = Cors(config.allowed_origins)
        self.app = web.Application(client_max_size=config.max_body_bytes,
                                   middlewares=[self._observe, self.cors.preflight,
                                                self._errors])
        self.app.add_routes([
            web.post("/v1/chat/completions", self.chat),
            web.post("/v1/completions", self.completions),
            web.get("/v1/models", self.models),
            web.get("/v1/models/{model}", self.model),
            web.get("/health", self.health),
            web.get("/version", self.version),
            web.get("/metrics", self.metrics),
            *NativeApi(self).routes(),  # SGLang's /generate and its helpers
            *ResponsesApi(self).routes(),  # OpenAI's Responses API, previous_response_id
            *SessionsApi(self).routes(),  # DELETE /v1/sessions/{session}, POST .../prepare
            *TokenizerApi(self).routes(),  # vLLM's /tokenize, /detokenize, /tokenizer_info
        ])
        self.app.on_cleanup.append(lambda _: self.backend.close())
        self.app.on_response_prepare.append(self.cors.on_prepare)
        if tracing.enabled():
            self.app.on_response_prepare.append(_trace_header)

    # -- middleware ------------------------------------------------------------------------

    @web.middleware
    async def _observe(self, request: web.Request, handler):
        """Outermost: one SERVER span per request (continuing a caller's traceparent), the
        request counters and an access log line carrying the trace id."""
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        start, status, note = time.perf_counter(), 500, turn_note.begin()
        parent = propagate.extract(request.headers) if tracing.enabled() else None
        with tracing.span(f"{request.method} {route}", parent=parent, kind=tracing.SERVER,
                          **{"http.request.method": request.method, "http.route": route}) as sp:
            try:
                response = await handler(request)
                status = response.status
                if tracing.enabled() and not response.prepared:  # streams: _trace_header
                    response.headers["x-trace-id"] = tracing.current_trace_id()
                return response
            except asyncio.CancelledError:  # the client hung up: nginx's 499, unless the
                status = 200 if request.get(ANSWERED) else CLIENT_CLOSED  # turn had ended
                if route in TURN_ROUTES and status == CLIENT_CLOSED:
                    metrics.TURNS.labels("cancelled").inc()
                raise
            finally:
                sp.set_attribute("http.response.status_code", status)
                elapsed = time.perf_counter() - start
                if route != "/metrics":
                    metrics.HTTP_REQUESTS.labels(route, str(status)).inc()
                    metrics.HTTP_LATENCY.labels(route).observe(elapsed)
                if route in TURN_ROUTES or status >= 400:  # a refusal says why: code, field
                    log.info("%s %s %d %.1f ms%s%s", request.method, request.path, status,
                             elapsed * 1000, note, request.get(REFUSED, ""))

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        """Every failure leaves as an OpenAI-style JSON error."""
        try:
            check_headers(request.headers)
            return await handler(request)
        except ApiError as exc:
            tracing.set_attributes(**{"error.type": exc.code or str(exc.status)})
            request[REFUSED] = exc.log_note()
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = {404: "not_found", 405: "method_not_allowed",
                    413: "request_too_large"}.get(exc.status)
            message = (f"request body exceeds {self.config.max_body_bytes} bytes"
                       if exc.status == 413 else f"{exc.reason}: {request.method} {request.path}")
            return ApiError(exc.status, message, None, code).response()
        except Exception:
            log.exception("unexpected error serving %s", request.path)
            return ApiError(500, "internal error", None, "internal_error").response()

    # -- helpers ---------------------------------------------------------------------------

    def _tenant(self, request: web.Request) -> str:
        tenant = self.tenants.resolve(request.headers.get("Authorization"))
        if tenant is None:
            raise ApiError(401, "invalid or missing API key (Authorization: Bearer KEY)",
                           None, "invalid_api_key")
        return tenant

    async def _turn(self, request: web.Request, prepare) -> web.StreamResponse:
        """prepare(request, tenant, body) checks the body and returns serve() (or a coroutine
        giving it), which runs the turn (called again if the scheduler was full)."""
        tenant = self._tenant(request)
        if self.draining:
            raise ApiError(503, "the gateway is shutting down", None, "unavailable",
                           self.config.retry_after_s)
        # Read and checked before the turn queues: a stalled upload must not hold a slot, and
        # a bad body gets its 400 without waiting in the FIFO.
        body = await read_body(request, self.config.max_body_bytes,
                               self.config.body_read_timeout_s)
        serve = prepare(request, tenant, body)
        if inspect.isawaitable(serve):  # a prepare that asks the scheduler first (responses)
            serve = await serve
        width = 1
        if isinstance(serve, Batch):  # several turns at once, each holding what one turn does
            width = serve.width(self.config.max_in_flight, self.config.tenant_max_in_flight)
            serve = functools.partial(serve.run, width)
        self._admit_tenant(tenant, width)
        try:
            async with self.admission.slot(tenant, width) as slot:  # its turn in the FIFO
                return await self._admitted(serve, slot)
        except Shed as exc:
            metrics.HTTP_SHED.labels(exc.reason).inc()
            raise ApiError(429, exc.message, None, "overloaded", exc.retry_after) from None
        finally:
            self.tenant_in_flight.leave(tenant, width)

    async def _admitted(self, serve, slot: Slot) -> web.StreamResponse:
        self.in_flight += 1  # one event loop: no lock needed
        metrics.HTTP_IN_FLIGHT.set(self.in_flight)
        try:
            while True:
                try:
                    return await serve()
                except ApiError as exc:
                    if not (_scheduler_full(exc) and self.config.max_waiting):
                        raise
                # refused before it ran: wait again at the head of the FIFO, not in a retry
                self.in_flight -= 1
                try:
                    await slot.requeue()
                finally:
                    self.in_flight += 1
        finally:
            self.in_flight -= 1
            metrics.HTTP_IN_FLIGHT.set(self.in_flight)

    def _admit_tenant(self, tenant: str, turns: int = 1) -> None:
        """The tenant's own limits. The rate token is taken last, so a request refused for
        another reason costs the tenant nothing."""
        if not self.tenant_in_flight.enter(tenant, turns):
            metrics.HTTP_SHED.labels("tenant_in_flight").inc()
            held = self.tenant_in_flight.count(tenant)
            raise ApiError(429, f"tenant {tenant} has {held} of its "
                           f"{self.tenant_in_flight.limit} turns in flight"
                           + (f" and this request runs {turns} at once" if turns > 1 else "")
                           + "; retry later", None, "tenant_concurrency_exceeded",
                           self.config.retry_after_s)
        wait = self.tenant_rate.acquire(tenant, time.monotonic())
        if wait:
            self.tenant_in_flight.leave(tenant, turns)
            metrics.HTTP_SHED.labels("tenant_rate").inc()
            raise ApiError(429, f"tenant {tenant} is over its rate of "
                           f"{self.tenant_rate.rate:g} requests/s; retry later", None,
                           "rate_limit_exceeded", retry_after_s(wait))

    # -- routes ----------------------------------------------------------------------------

    def _openai(self, chat: bool):
        def prepare(request: web.Request, tenant: str, body: dict):
            model = check_model(body, self.config.served_model_name)
            if not chat:
                return self._completion(request, tenant, body, model)
            parsed = parse_chat(body, self.config)
            check_prompt_size(parsed, chat, self.config.max_prompt_bytes,
                              self.config.max_model_len)
            if parsed.n > 1:
                return self.batch.batch(request, tenant, [parsed], model, True)
            return lambda: self.turns.serve(request, tenant, parsed,
                                            Reply(chat, model, parsed.logprobs))
        return prepare

    def _completion(self, request: web.Request, tenant: str, body: dict, model: str):
        """One prompt's turn, or a batch's (completion_batch.py), each prompt size-checked."""
        batch = parse_completion(body, self.config)
        for i, parsed in enumerate(batch):
            check_prompt_size(parsed, False, self.config.max_prompt_bytes,
                              self.config.max_model_len, "prompt" if len(batch) == 1 else
                              f"prompt[{i}]")
        if len(batch) > 1 or batch[0].n > 1:
            return self.batch.batch(request, tenant, batch, model)
        parsed = batch[0]
        return lambda: self.turns.serve(request, tenant, parsed, Reply(
            False, model, parsed.logprobs, parsed.echo, parsed.raw_prompt))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._turn(request, self._openai(chat=True))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._turn(request, self._openai(chat=False))

    async def models(self, request: web.Request) -> web.Response:
        self._tenant(request)
        return web.json_response({"object": "list", "data": [
            model_card(name, self.config, self.started) for name in
            self.config.served_model_name]})

    async def model(self, request: web.Request) -> web.Response:
        self._tenant(request)
        name = request.match_info["model"]
        if name not in self.config.served_model_name:
            raise ApiError(404, f"The model `{name[:200]}` does not exist.", "model",
                           "model_not_found")
        return web.json_response(model_card(name, self.config, self.started))

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def health(self, request: web.Request) -> web.Response:
        reasons = (["the gateway is draining"] if self.draining
                   else await self.health_check.problems())
        if reasons:
            raise ApiError(503, "degraded: " + "; ".join(reasons), None, "unavailable",
                           self.config.retry_after_s)
        return web.json_response({"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.tenants.may_read_metrics(request.headers.get("Authorization"),
                                             self.config.metrics_key):
            raise ApiError(401, "/metrics needs an API key (Authorization: Bearer KEY: the "
                           "metrics key or a tenant's), or scrape --metrics-listen", None,
                           "invalid_api_key")
        return metrics_response()
