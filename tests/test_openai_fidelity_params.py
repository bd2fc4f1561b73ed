"""What third-party clients send, against a real gateway over a fake scheduler: each field means
what OpenAI / vLLM define, or gets a 400 naming the field as it was sent."""
from __future__ import annotations

import importlib.metadata

import openai
import pytest

from services.runtime.config import load_config
from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig, model_flags
from tests.fake_scheduler import fake_on_a_port
from tests.test_gateway_api import assert_error, chat_body, client, post, raw

MODEL, HF_ID = "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct"


fake = pytest.fixture(scope="module", name="fake")(fake_on_a_port)


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}",
                           request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


def completion(prompt, **extra) -> dict:
    return {"model": MODEL, "prompt": prompt, **extra}


@pytest.mark.parametrize("route, payload, param", [
    ("chat", chat_body("x", max_completion_tokens=2 ** 32), "max_completion_tokens"),
    ("chat", chat_body("x", max_completion_tokens=0), "max_completion_tokens"),
    ("chat", chat_body("x", max_tokens=10 ** 30), "max_tokens"),
    ("chat", chat_body("x", max_tokens=8193), "max_tokens"),  # beyond the model's context
    ("cmpl", completion("x", max_tokens=2 ** 32), "max_tokens"),
    ("chat", chat_body("x", seed=2 ** 64), "seed"),
    ("chat", chat_body("x", seed=-1), "seed"),
    ("chat", chat_body("x", seed=1.5), "seed"),
    ("cmpl", completion([1, 49152]), "prompt"),  # the vocabulary is 49152 tokens
    ("cmpl", completion([2 ** 31]), "prompt"),
    ("cmpl", completion([-1]), "prompt"),
    ("chat", chat_body("x", top_k=2 ** 40), "top_k"),
    ("chat", chat_body("x", top_k=-2), "top_k"),
    ("chat", chat_body("x", top_p=0), "top_p"),
    ("chat", chat_body("x", top_p=1.5), "top_p"),
    ("chat", chat_body("x", presence_penalty=2.5), "presence_penalty"),
    ("chat", chat_body("x", frequency_penalty="high"), "frequency_penalty"),
    ("chat", chat_body("x", temperature=float("nan")), "temperature"),
    ("chat", chat_body("x", logit_bias={"49152": 1}), "logit_bias"),
    ("chat", chat_body("x", logit_bias={"hello": 1}), "logit_bias"),
    ("chat", chat_body("x", logit_bias={"-3": 1}), "logit_bias"),
    ("chat", chat_body("x", logit_bias={"9" * 5000: 1}), "logit_bias"),
    ("chat", chat_body("x", logit_bias={"5": 101}), "logit_bias"),
    ("chat", chat_body("x", logit_bias=[5]), "logit_bias"),
    ("chat", chat_body("x", response_format={"type": "yaml"}), "response_format"),
    ("chat", chat_body("x", response_format={"type": "json_schema", "json_schema": {
        "name": "a", "schema": {"type": "object"}}}), "response_format"),
    ("chat", chat_body("x", min_p=1.1), "min_p"),
    ("chat", chat_body("x", min_p=-0.1), "min_p"),
    ("chat", chat_body("x", min_p="0.1"), "min_p"),
    ("chat", chat_body("x", repetition_penalty=0), "repetition_penalty"),
    ("chat", chat_body("x", repetition_penalty=2.5), "repetition_penalty"),
    ("chat", chat_body("x", repetition_penalty=-1), "repetition_penalty"),
    ("cmpl", completion("x", repetition_penalty=True), "repetition_penalty"),
    ("cmpl", completion("x", min_p=float("inf")), "min_p"),
    ("chat", chat_body("x", continue_final_message=True), "continue_final_message"),
    ("chat", chat_body("x", continue_final_message=True, add_generation_prompt=False),
     "messages"),  # the last message is the user's: nothing to continue
    ("cmpl", completion("x", suffix="y"), "suffix"),  # (echo is served: test_echo_batch.py)
    ("cmpl", completion("x", best_of=3), "best_of"),
])
def test_out_of_range_or_unsupported_fields_get_400_naming_them(gateway, fake, route, payload,
                                                                 param):
    sent = len(fake.requests)
    path = "/v1/chat/completions" if route == "chat" else "/v1/completions"
    status, _, body = post(gateway, path, payload)
    assert_error(status, body, 400)
    assert body["error"]["param"] == param, body
    assert len(fake.requests) == sent  # refused before it reached the scheduler


@pytest.mark.parametrize("header", ["X-Session-Id"])
def test_bad_session_header_names_the_header(gateway, header):
    status, _, body = post(gateway, "/v1/chat/completions", chat_body("x"), {header: "s" * 200})
    assert_error(status, body, 400)
    assert body["error"]["param"] == header


def test_sampling_fields_reach_the_scheduler(gateway, fake):
    client(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=0.7, top_p=0.9,
        presence_penalty=0.5, frequency_penalty=-1.0, logit_bias={"42": -100, "7": 2.5},
        seed=2 ** 64 - 1, response_format={"type": "text"},
        extra_body={"top_k": 20, "min_p": 0, "repetition_penalty": 1})
    sent = fake.requests[-1]
    assert (sent.top_k, sent.seed, sent.presence_penalty, sent.frequency_penalty) == (
        20, 2 ** 64 - 1, 0.5, -1.0)
    assert sent.top_p == pytest.approx(0.9) and sent.temperature == pytest.approx(0.7)
    assert dict(sent.logit_bias) == {42: -100.0, 7: 2.5}
    assert (sent.min_p, sent.repetition_penalty) == (0.0, 1.0)
    client(gateway).completions.create(model=MODEL, prompt="x", temperature=0.5,
                                       extra_body={"min_p": 0.25, "repetition_penalty": 1.5})
    sent = fake.requests[-1]
    assert (sent.min_p, sent.repetition_penalty) == (0.25, 1.5)
    client(gateway).chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                    "content": "x"}])
    assert (fake.requests[-1].min_p, fake.requests[-1].repetition_penalty) == (0.0, 1.0)
    client(gateway).chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                    "content": "x"}],
                                            extra_body={"top_k": -1})
    assert fake.requests[-1].top_k == 0  # vLLM's -1: no top-k


def test_unseeded_requests_get_fresh_random_seeds(gateway, fake):
    seeds = set()
    for _ in range(3):
        post(gateway, "/v1/chat/completions", chat_body("x"))
        seeds.add(fake.requests[-1].seed)
    assert len(seeds) == 3
    post(gateway, "/v1/chat/completions", chat_body("x", seed=5))
    assert fake.requests[-1].seed == 5


def test_max_tokens_beyond_the_context_says_so(gateway):
    status, _, body = post(gateway, "/v1/completions", completion("x", max_tokens=8193))
    assert_error(status, body, 400, "more than the model's context of 8192 tokens")
    status, _, body = post(gateway, "/v1/chat/completions",
                           chat_body("x", max_completion_tokens=10 ** 30))
    assert_error(status, body, 400, "outside the 64-bit integer range")  # the generic check
    assert body["error"]["param"] == "max_completion_tokens"


def test_max_completion_tokens_wins_over_max_tokens(gateway, fake):
    post(gateway, "/v1/chat/completions", chat_body("x", max_completion_tokens=3, max_tokens=9))
    assert fake.requests[-1].max_tokens == 3
    post(gateway, "/v1/chat/completions", chat_body("x", max_tokens=8192))  # the context: ok
    assert fake.requests[-1].max_tokens == 8192


def test_an_unset_answer_length_is_left_to_the_deployment(gateway, fake):
    """Chat and Responses send none (the worker's default: the context's end, unless the
    operator bounds it); completions send OpenAI's 16."""
    post(gateway, "/v1/chat/completions", chat_body("x"))
    assert fake.requests[-1].max_tokens == 0
    post(gateway, "/v1/responses", {"model": MODEL, "input": "x"})
    assert fake.requests[-1].max_tokens == 0
    post(gateway, "/v1/completions", completion("x"))
    assert fake.requests[-1].max_tokens == 16


def test_json_mode_reaches_the_scheduler(gateway, fake):
    post(gateway, "/v1/chat/completions", chat_body("x", response_format={"type": "json_object"}))
    assert fake.requests[-1].json_object
    post(gateway, "/v1/chat/completions", chat_body("x", response_format={"type": "text"}))
    assert not fake.requests[-1].json_object
    post(gateway, "/v1/responses", {"model": MODEL, "input": "x",
                                    "text": {"format": {"type": "json_object"}}})
    assert fake.requests[-1].json_object


def test_prefill_flags_reach_the_scheduler(gateway, fake):
    history = [{"role": "user", "content": "Capital of France?"},
               {"role": "assistant", "content": "The capital is"}]
    body = {"model": MODEL, "messages": history}
    post(gateway, "/v1/chat/completions", {**body, "continue_final_message": True,
                                           "add_generation_prompt": False})
    sent = fake.requests[-1]
    assert sent.continue_final_message and sent.no_generation_prompt
    post(gateway, "/v1/chat/completions", {**body, "add_generation_prompt": False})
    sent = fake.requests[-1]
    assert not sent.continue_final_message and sent.no_generation_prompt
    post(gateway, "/v1/chat/completions", body)
    sent = fake.requests[-1]
    assert not sent.continue_final_message and not sent.no_generation_prompt


def test_the_hf_repo_id_is_an_alias_and_the_first_name_is_reported(gateway):
    reply = client(gateway).chat.completions.create(
        model=HF_ID, messages=[{"role": "user", "content": "hi"}])
    assert reply.model == MODEL
    cards = client(gateway).models.list().data
    assert [c.id for c in cards] == [MODEL, HF_ID]
    for card in cards:
        extra = card.model_dump()
        assert (extra["max_model_len"], extra["owned_by"], extra["root"]) == (8192, "bidaw",
                                                                              MODEL)
    assert client(gateway).models.retrieve(HF_ID).id == HF_ID
    with pytest.raises(openai.NotFoundError):
        client(gateway).chat.completions.create(
            model="HuggingFaceTB/SmolLM2-360M-Instruct", messages=[{"role": "user",
                                                                    "content": "hi"}])


def test_version_route(gateway):
    status, _, body = raw(gateway, "GET", "/version")
    assert status == 200 and body == {"version": importlib.metadata.version("bidaw")}


def test_served_model_names_from_config_and_env(fake, monkeypatch):
    monkeypatch.setenv("BIDAW_GATEWAY_SERVED_MODEL_NAME", "mine,other/alias")
    config = load_config(GatewayConfig, None, env_prefix="BIDAW_GATEWAY_",
                         listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}")
    assert config.served_model_name == ["mine", "other/alias"]
    with BackgroundGateway(config) as gw:
        assert [m.id for m in client(gw).models.list().data] == ["mine", "other/alias"]
        reply = client(gw).completions.create(model="other/alias", prompt="a b", max_tokens=2)
        assert reply.model == "mine"
        status, _, body = post(gw, "/v1/completions", completion("a"))  # MODEL is not served
        assert_error(status, body, 404, "mine")


def test_launcher_flags_for_the_stock_and_other_models():
    assert model_flags("smollm2-135m") == ["--served-model-name", f"{MODEL},{HF_ID}"]
    assert model_flags("smollm2-135m", ["a", "b"]) == ["--served-model-name", "a,b"]
    # another model's context and vocabulary are unknown here: the worker checks them
    assert model_flags("/m/x.gguf") == ["--served-model-name", "/m/x.gguf", "--max-model-len",
                                        "0", "--vocab-size", "0"]


def test_bidaw_up_passes_served_model_names_through():
    from services.cli.main import build_parser

    names = build_parser().parse_args(["up", "--served-model-name", "a", "b"]).served_model_name
    assert names == ["a", "b"]
    flags = model_flags("smollm2-135m", names)  # what the launcher gives `serve gateway`
    args = build_parser().parse_args(["serve", "gateway", *flags])
    assert load_config(GatewayConfig, args).served_model_name == ["a", "b"]
