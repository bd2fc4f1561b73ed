"""API keys -> tenants, session scoping, and the loopback-only rule for an open gateway."""
from __future__ import annotations

import pytest

from services.gateway.app import Gateway
from services.gateway.auth import OPEN_TENANT, Tenants, parse_keys, scoped_session
from services.gateway.config import GatewayConfig
from services.gateway.main import check_exposure, is_loopback


def test_keys_from_flag_env_and_file(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.write_text("# tenant key\nacme sk-acme-1\nglobex:sk-globex-2\n\n")
    monkeypatch.setenv("BIDAW_GATEWAY_API_KEYS", "initech:sk-ini-3")
    from services.runtime.config import load_config

    config = load_config(GatewayConfig, env_prefix="BIDAW_GATEWAY_", api_keys_file=str(keys))
    tenants = Tenants.from_config(config)
    assert tenants.resolve("Bearer sk-acme-1") == "acme"
    assert tenants.resolve("bearer sk-globex-2") == "globex"
    assert tenants.resolve("Bearer sk-ini-3") == "initech"
    for bad in (None, "", "Bearer", "Bearer ", "Basic sk-acme-1", "Bearer sk-acme-", "sk-acme-1",
                "Bearer sk-acme-1x"):
        assert tenants.resolve(bad) is None


def test_bad_key_entries_are_refused_without_echoing_the_key():
    with pytest.raises(ValueError) as err:
        parse_keys("acme", "--api-keys")
    assert "acme" not in str(err.value).replace("`tenant:key`", "")
    with pytest.raises(ValueError, match="tenant"):
        parse_keys("bad tenant!:sk-secret", "--api-keys")
    with pytest.raises(ValueError, match="two entries"):
        Tenants(parse_keys("a:k1,b:k1", "x"))


@pytest.mark.parametrize("content, error", [
    (b"acme:sk-\xff\xfe\n", "not UTF-8 text (byte 9)"),  # was a UnicodeDecodeError traceback
    (b"acme:sk-\x01\x02\n", "acme's key must be 1 to 4096 printable ASCII characters"),
    (b"acme:" + b"k" * 5000 + b"\n", "acme's key must be 1 to 4096"),  # no header can carry it
    (b"acme:sk-1\nglobex:sk-1\n", "the same API key is given to two entries"),
])
def test_a_keys_file_no_client_could_use_stops_the_gateway_in_one_line(tmp_path, content,
                                                                       error):
    keys = tmp_path / "keys"
    keys.write_bytes(content)
    with pytest.raises(ValueError) as err:
        Tenants.from_config(GatewayConfig(api_keys_file=str(keys)))
    assert error in str(err.value) and "sk-" not in str(err.value), str(err.value)


def test_serve_gateway_says_a_bad_keys_file_in_one_line(tmp_path):
    import subprocess
    import sys

    from services.runtime.cluster_auth import write_token_file

    write_token_file(str(tmp_path / "token"))
    (tmp_path / "keys").write_bytes(b"acme:sk-\xff\n")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "gateway", "--listen",
         "127.0.0.1:0", "--scheduler", "127.0.0.1:1", "--api-keys-file", str(tmp_path / "keys"),
         "--cluster-token-file", str(tmp_path / "token")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"bidaw serve gateway: --api-keys-file {tmp_path / 'keys'}: "
                                   "not UTF-8 text (byte 9)")


def test_open_gateway_has_one_tenant_and_sessions_are_namespaced():
    tenants = Tenants([])
    assert tenants.open and tenants.resolve(None) == OPEN_TENANT
    assert scoped_session("acme", "chat-1") != scoped_session("globex", "chat-1")
    # a tenant name has no "/", so the first "/" of a scoped id always ends the tenant
    with pytest.raises(ValueError):
        parse_keys("a/b:sk-1", "x")


def test_open_gateway_binds_loopback_only_unless_allowed():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    open_config = GatewayConfig(listen="0.0.0.0:8000")
    with pytest.raises(SystemExit, match="loopback"):
        check_exposure(open_config, Gateway(open_config))
    allowed = GatewayConfig(listen="0.0.0.0:8000", allow_open=True)
    check_exposure(allowed, Gateway(allowed))
    keyed = GatewayConfig(listen="0.0.0.0:8000", api_keys="acme:sk-1")
    check_exposure(keyed, Gateway(keyed))
