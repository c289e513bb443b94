"""Client keys stored as their SHA-256: ``key_sha256``, ``api_key_hashes`` and ``turnout key new`` / ``hash``."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gateway_support import Raw, get, post
from typer.testing import CliRunner

from fakes import FakeClock, Fleet
from turnout import Client
from turnout.cli.main import app
from turnout.config import key_id, load_config_toml
from turnout.core.errors import ConfigError
from turnout.core.secrets import digest_key_id
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.signin import COOKIE, new_secret

DEFAULT_KEY = "tk-default-key-for-hash-tests"
TEAM_KEY = "tk-team-key-for-hash-tests"
OTHER_KEY = "tk-other-key-for-hash-tests"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


BASE = """
default_provider = "openai.main"
[reliability]
provider_retries = 0
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
pricing = { input = 1.0, output = 1.0 }
[providers.models.openai.open]
api_key = "sk-open"
pricing = { input = 1.0, output = 1.0 }
[[model_routes]]
hint = "fast"
model_provider = "openai.open"
model = "gpt-4.1-nano"
"""
CHAT: dict[str, Any] = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}


def ledgered(ledger: Path, gateway: str) -> str:
    """``BASE`` with a ledger at ``ledger`` and these ``[gateway]`` lines (tables included)."""
    return BASE + f'[ledger]\npath = "{ledger}"\n' + gateway


@asynccontextmanager
async def served(text: str, *, secret: bytes | None = None) -> AsyncIterator[GatewayServer]:
    """A gateway over fake adapters on a free loopback port (its ledger as the config says)."""
    clock = FakeClock()
    client = Client.from_toml(text, adapter_builder=Fleet(), env=clock.env, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True, session_secret=secret)) as server:
        yield server


def callers_in(ledger: Path) -> list[str]:
    """The caller of every call the ledger holds, in order."""
    with sqlite3.connect(ledger) as db:
        return [row[0] for row in db.execute("SELECT caller FROM calls ORDER BY ts")]


def models(raw: Raw) -> list[str]:
    assert raw.status == 200, raw.body
    return [m["id"] for m in raw.json()["data"]]


# --- the gateway accepts hashes -----------------------------------------------------------------------


async def test_a_hashed_named_key_authenticates_with_its_own_models_and_limits(tmp_path: Path) -> None:
    """``key_sha256``: the key authenticates, gets only its listed models and its rpm; the ledger names it."""
    ledger = tmp_path / "l.sqlite3"
    text = ledgered(ledger, f'[gateway.keys.team]\nkey_sha256 = "{sha(TEAM_KEY)}"\nmodels = ["hint:fast"]\nrpm = 2\n')
    async with served(text) as server:
        listed = models(await get(server, "/v1/models", key=TEAM_KEY))
        refused = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
        fast = [await post(server, "/v1/chat/completions", {**CHAT, "model": "hint:fast"}, key=TEAM_KEY)]
        fast.append(await post(server, "/v1/chat/completions", {**CHAT, "model": "hint:fast"}, key=TEAM_KEY))
        over = await post(server, "/v1/chat/completions", {**CHAT, "model": "hint:fast"}, key=TEAM_KEY)
    assert listed == ["hint:fast"]
    assert refused.status == 404 and refused.json()["error"]["code"] == "model_not_found"
    assert [f.status for f in fast] == [200, 200]
    assert fast[0].headers["x-turnout-provider"] == "openai.open"
    assert over.status == 429 and over.json()["error"]["code"] == "rate_limit_exceeded"
    assert set(callers_in(ledger)) == {"team"}  # its name, as with key = "..."


@pytest.mark.parametrize("form", ["key", "hash", "upper-case hash"])
async def test_a_default_key_keeps_its_key_id_whether_stored_as_the_key_or_its_hash(tmp_path: Path, form: str) -> None:
    """``api_keys`` or ``api_key_hashes``: the same key authenticates with the default access, and the ledger
    names it by the same key id (the first 8 hex digits of its SHA-256), so switching keeps its history.
    """
    ledger = tmp_path / "l.sqlite3"
    line = {
        "key": f'api_keys = ["{DEFAULT_KEY}"]',
        "hash": f'api_key_hashes = ["{sha(OTHER_KEY)}", "{sha(DEFAULT_KEY)}"]',
        "upper-case hash": f'api_key_hashes = ["{sha(DEFAULT_KEY).upper()}"]',
    }[form]
    async with served(ledgered(ledger, f"[gateway]\n{line}\n")) as server:
        ok = await post(server, "/v1/chat/completions", CHAT, key=DEFAULT_KEY)
        listed = models(await get(server, "/v1/models", key=DEFAULT_KEY))
    assert ok.status == 200, ok.body
    assert "hint:fast" in listed and "openai.main" in listed  # the default access
    assert callers_in(ledger) == [key_id(DEFAULT_KEY)]


@pytest.mark.parametrize(
    ("authorization", "x_api_key"),
    [(f"Bearer {OTHER_KEY}", None), (None, "wrong"), (f"Bearer {sha(TEAM_KEY)}", None), (None, None)],
)
async def test_a_wrong_key_or_the_hash_itself_is_refused(authorization: str | None, x_api_key: str | None) -> None:
    """A wrong key is a 401, and so is the stored hash sent as if it were the key: the hash is not a credential."""
    text = BASE + f'[ledger]\nenabled = false\n[gateway.keys.team]\nkey_sha256 = "{sha(TEAM_KEY)}"\n'
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    if x_api_key is not None:
        headers["x-api-key"] = x_api_key
    async with (
        served(text) as server,
        aiohttp.ClientSession() as session,
        session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp,
    ):
        assert resp.status == 401
        assert (await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status == 200


async def test_the_status_endpoints_and_page_take_a_hashed_key_and_sessions_survive_the_switch() -> None:
    """/status and the status page accept a hashed key; a page session signed in while the config held the key
    itself stays valid once it holds the key's hash (the session is bound to the digest, which did not change).
    """
    plain = BASE + f'[ledger]\nenabled = false\n[gateway.keys.ops]\nkey = "{TEAM_KEY}"\n'
    hashed = BASE + f'[ledger]\nenabled = false\n[gateway.keys.ops]\nkey_sha256 = "{sha(TEAM_KEY)}"\n'
    secret = new_secret()
    async with (
        served(plain, secret=secret) as server,
        aiohttp.ClientSession() as session,
        session.post(server.url + "/login", data={"key": TEAM_KEY}, allow_redirects=False) as resp,
    ):
        assert resp.status == 303
        cookie = resp.cookies[COOKIE].value
    async with served(hashed, secret=secret) as server:
        status = await get(server, "/status", key=TEAM_KEY)
        page = await get(server, "/", key=TEAM_KEY)
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.url + "/", headers={"Cookie": f"{COOKIE}={cookie}"}) as resp,
        ):
            resumed = await resp.text()
    assert status.status == 200
    assert page.status == 200 and 'action="/login"' not in page.body.decode()
    assert "Sign out" in resumed


async def test_a_gateway_with_only_hashed_keys_is_not_open(caplog: pytest.LogCaptureFixture) -> None:
    """Hashed keys count as keys: no open-gateway warning, and a request without a key is a 401."""
    text = BASE + f'[ledger]\nenabled = false\n[gateway]\napi_key_hashes = ["{sha(DEFAULT_KEY)}"]\n'
    with caplog.at_level(logging.INFO):
        async with served(text) as server:
            anonymous = await post(server, "/v1/chat/completions", CHAT, key=None)
            ok = await post(server, "/v1/chat/completions", CHAT, key=DEFAULT_KEY)
            assert server.gateway.auth.open is False
    assert anonymous.status == 401 and ok.status == 200
    assert "NO CLIENT API KEY" not in caplog.text
    assert DEFAULT_KEY not in caplog.text


# --- configuration errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "path"),
    [
        (f'key = "{TEAM_KEY}"\nkey_sha256 = "{sha(TEAM_KEY)}"\n', "gateway.keys.team"),
        ('models = ["hint:fast"]\n', "gateway.keys.team"),
        (f'key_sha256 = "{TEAM_KEY}"\n', "gateway.keys.team.key_sha256"),  # the key pasted where its hash goes
        (f'key_sha256 = "{sha(TEAM_KEY)[:63]}"\n', "gateway.keys.team.key_sha256"),
        (f'key_sha256 = "{sha(TEAM_KEY)}0"\n', "gateway.keys.team.key_sha256"),
    ],
)
def test_a_named_key_needs_exactly_one_of_key_and_key_sha256(table: str, path: str) -> None:
    """Both, neither or a digest that is not 64 hex digits: an error naming the path, never showing a value."""
    with pytest.raises(ConfigError) as info:
        load_config_toml(BASE + "[gateway.keys.team]\n" + table, env={})
    assert info.value.path == path
    shown = str(info.value)
    assert TEAM_KEY not in shown and sha(TEAM_KEY)[:16] not in shown


@pytest.mark.parametrize(
    "bad", [DEFAULT_KEY, "g" * 64, sha(DEFAULT_KEY)[:-1], f" {sha(DEFAULT_KEY)}", f"sha256:{sha(DEFAULT_KEY)}"]
)
def test_a_bad_hash_in_api_key_hashes_names_its_index(bad: str) -> None:
    """An ``api_key_hashes`` entry that is not 64 hex digits is an error at ``gateway.api_key_hashes[i]``."""
    text = BASE + f'[gateway]\napi_key_hashes = ["{sha(OTHER_KEY)}", "{bad}"]\n'
    with pytest.raises(ConfigError) as info:
        load_config_toml(text, env={})
    assert info.value.path == "gateway.api_key_hashes[1]"
    assert bad.strip() not in str(info.value) and DEFAULT_KEY not in str(info.value)


def test_upper_case_hex_is_read_as_lower_case() -> None:
    """A digest in upper case (as some tools print it) is accepted and kept in lower case."""
    text = BASE + f'[gateway]\napi_key_hashes = ["{sha(DEFAULT_KEY).upper()}"]\n'
    text += f'[gateway.keys.team]\nkey_sha256 = "{sha(TEAM_KEY).upper()}"\n'
    config = load_config_toml(text, env={})
    assert config.gateway.api_key_hashes == [sha(DEFAULT_KEY)]
    assert config.gateway.keys["team"].key_sha256 == sha(TEAM_KEY)


@pytest.mark.parametrize(
    ("gateway", "path"),
    [
        (f'[gateway]\napi_keys = ["{TEAM_KEY}"]\n[gateway.keys.team]\nkey_sha256 = "{{h}}"\n', "gateway.keys.team"),
        (f'[gateway]\napi_key_hashes = ["{{h}}"]\n[gateway.keys.team]\nkey = "{TEAM_KEY}"\n', "gateway.keys.team"),
        ('[gateway.keys.a]\nkey_sha256 = "{h}"\n[gateway.keys.team]\nkey_sha256 = "{h}"\n', "gateway.keys.team"),
    ],
)
def test_a_key_given_as_itself_and_as_its_hash_is_a_duplicate(gateway: str, path: str) -> None:
    """The same key twice, as itself in one place and as its hash in another, fails at start like any duplicate."""
    client = Client.from_toml(BASE + "[ledger]\nenabled = false\n" + gateway.format(h=sha(TEAM_KEY)), ledger=False)
    with pytest.raises(ConfigError) as info:
        Gateway(client, keys=None)
    assert info.value.code == "duplicate_key"
    assert info.value.path is not None and info.value.path.startswith(path + ".key")
    assert TEAM_KEY not in str(info.value)


# --- key ids -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [DEFAULT_KEY, "sk-x", "ключ-ü"])
def test_the_key_id_of_a_hash_is_the_key_id_of_its_key(key: str) -> None:
    """A key known by its SHA-256 gets the id the key itself gets: the first 8 hex digits of the digest."""
    digest = hashlib.sha256(key.encode()).digest()
    assert digest_key_id(digest) == key_id(key) == sha(key)[:8]


def test_the_gateway_names_a_hashed_default_key_by_its_key_id() -> None:
    """The caller a hashed default key authenticates as is named by the key's id, the same as for the plain key."""
    plain = Client.from_toml(BASE + f'[ledger]\nenabled = false\n[gateway]\napi_keys = ["{DEFAULT_KEY}"]\n')
    hashed = Client.from_toml(BASE + f'[ledger]\nenabled = false\n[gateway]\napi_key_hashes = ["{sha(DEFAULT_KEY)}"]\n')
    names = []
    for client in (plain, hashed):
        caller = Gateway(client).auth.caller(f"Bearer {DEFAULT_KEY}", None)
        assert caller is not None
        names.append(caller.name)
    assert names == [key_id(DEFAULT_KEY)] * 2


# --- turnout key new / hash ----------------------------------------------------------------------------


async def test_turnout_key_new_prints_a_key_once_and_toml_that_accepts_it() -> None:
    """``turnout key new NAME``: standard output is TOML to paste (no key in it), standard error holds the key."""
    result = await asyncio.to_thread(CliRunner().invoke, app, ["key", "new", "ci-bot"])
    assert result.exit_code == 0, result.output
    table = tomllib.loads(result.stdout)
    digest = table["gateway"]["keys"]["ci-bot"]["key_sha256"]
    [key] = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith("tk-")]
    assert key not in result.stdout
    assert "shown this once" in result.stderr
    assert len(key) >= 40 and sha(key) == digest
    again = await asyncio.to_thread(CliRunner().invoke, app, ["key", "new", "ci-bot"])
    assert again.stdout != result.stdout  # a fresh key each time
    async with served(BASE + "[ledger]\nenabled = false\n" + result.stdout) as server:
        ok = await post(server, "/v1/chat/completions", CHAT, key=key)
        wrong = await post(server, "/v1/chat/completions", CHAT, key=key[:-1])
    assert ok.status == 200 and wrong.status == 401


def test_turnout_key_new_json_holds_the_key_its_hash_and_the_toml() -> None:
    """``--json``: one object for scripts that hand the key out."""
    import orjson

    result = CliRunner().invoke(app, ["key", "new", "team_2", "--json"])
    assert result.exit_code == 0, result.output
    body = orjson.loads(result.stdout)
    assert body["key"].startswith("tk-") and body["key_sha256"] == sha(body["key"])
    assert tomllib.loads(body["toml"]) == {"gateway": {"keys": {"team_2": {"key_sha256": body["key_sha256"]}}}}


@pytest.mark.parametrize("name", ["", "two words", "a.b", 'q"uote', "[x]"])
def test_turnout_key_new_refuses_a_name_that_is_not_a_bare_toml_key(name: str) -> None:
    """A name the printed ``[gateway.keys.NAME]`` header could not hold as written is a usage error (exit 2)."""
    result = CliRunner().invoke(app, ["key", "new", name])
    assert result.exit_code == 2
    assert "tk-" not in result.output


@pytest.mark.parametrize("given", [f"{TEAM_KEY}\n", f"  {TEAM_KEY}  \n\n", TEAM_KEY])
def test_turnout_key_hash_prints_the_line_for_a_key_read_from_stdin(given: str) -> None:
    """``turnout key hash``: the ``key_sha256`` line of the key on stdin (blanks around it are not part of it),
    and a config with that line accepts the key.
    """
    result = CliRunner().invoke(app, ["key", "hash"], input=given)
    assert result.exit_code == 0, result.output
    assert result.stdout == f'key_sha256 = "{sha(TEAM_KEY)}"\n'
    assert TEAM_KEY not in result.output
    assert key_id(TEAM_KEY) in result.stderr
    config = load_config_toml(BASE + "[gateway.keys.team]\n" + result.stdout, env={})
    assert config.gateway.keys["team"].key_sha256 == sha(TEAM_KEY)


@pytest.mark.parametrize("given", ["", "  \n", "first-secret\nsecond-secret\n"])
def test_turnout_key_hash_refuses_no_key_or_several(given: str) -> None:
    """Nothing on stdin, or more than one line: a usage error, nothing printed on stdout."""
    result = CliRunner().invoke(app, ["key", "hash"], input=given)
    assert result.exit_code == 2 and result.stdout == ""
    assert "secret" not in result.stderr
