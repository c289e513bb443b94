"""``turnout key``: make a gateway client key, or hash one, so that a config holds only the key's SHA-256.

``turnout key new NAME`` makes a random key and prints it once, on standard error with a note, and the TOML that
accepts it on standard output: ``turnout key new ci >> turnout.toml`` appends the table, and the key is written
nowhere. ``turnout key hash`` reads a key from standard input (typed without echo at a terminal) and prints its
``key_sha256`` line, to convert a key already in use. Neither command reads or writes a file.
"""

from __future__ import annotations

import getpass
import re
import secrets
import sys
from typing import Annotated

import orjson
import typer

from turnout.core.secrets import digest_key_id

#: How every key ``turnout key new`` makes starts: recognisable in a secret scanner or a leaked log.
KEY_PREFIX = "tk-"
#: Random bytes in a new key (256 bits: a plain SHA-256 of it cannot be reversed by guessing).
KEY_BYTES = 32
#: A name ``turnout key new`` accepts: a bare TOML key, so that ``[gateway.keys.NAME]`` needs no quoting.
_NAME = re.compile(r"[A-Za-z0-9_-]+")

key_app = typer.Typer(
    name="key",
    help="Make or hash gateway client keys: a config may hold a key's SHA-256 (key_sha256) instead of the key.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def new_key() -> str:
    """A fresh random client key: ``tk-`` and 43 URL-safe characters."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def sha256(key: str) -> bytes:
    """The SHA-256 digest of a client key, as the gateway computes it (its hex is what ``key_sha256`` holds)."""
    from turnout.gateway.auth import key_digest  # the gateway's own hash; imported here, not with every command

    return key_digest(key)


def key_table(name: str, hexdigest: str) -> str:
    """The ``[gateway.keys.<name>]`` table that accepts the key whose SHA-256 is ``hexdigest``."""
    return f'[gateway.keys.{name}]\nkey_sha256 = "{hexdigest}"\n'


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise typer.BadParameter(
            "a key's name is written as a bare TOML key here: letters, digits, '_' and '-' only", param_hint="NAME"
        )
    return value


@key_app.command("new")
def new(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The key's name: [gateway.keys.NAME].", callback=_name)],
    as_json: JsonOption = False,
) -> None:
    """Make a random client key; print it once, and the [gateway.keys.NAME] table that accepts it.

    The key goes to standard error, the TOML to standard output: `turnout key new NAME >> turnout.toml` appends
    only the table.
    Add models, limits and the rest to the table as for any key. Nothing is written to a file.
    """
    key = new_key()
    hexdigest = sha256(key).hex()
    table = key_table(name, hexdigest)
    if as_json:
        body = {"name": name, "key": key, "key_sha256": hexdigest, "toml": table}
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stderr.write(
        f"The key for {name}, shown this once (the config holds only its SHA-256; it cannot be shown again):\n"
        f"  {key}\n"
        "Give it to the client now. The lines for turnout.toml:\n"
    )
    sys.stdout.write(table)


@key_app.command("hash")
def hash_(as_json: JsonOption = False) -> None:
    """Read a client key from standard input and print its key_sha256 line (to stop storing the key itself).

    Surrounding blanks and the final newline are not part of the key, as in the config. At a terminal the key
    is read without echo. The same digest goes in [gateway] api_key_hashes for a key with the default access.
    """
    key = (getpass.getpass("key: ") if sys.stdin.isatty() else sys.stdin.read()).strip()
    if not key or "\n" in key or "\r" in key:
        said = "no key" if not key else "more than one line; give one key"
        sys.stderr.write(f"error: standard input holds {said}\n")
        raise typer.Exit(2)
    digest = sha256(key)
    hexdigest = digest.hex()
    if as_json:
        body = {"key_sha256": hexdigest, "key_id": digest_key_id(digest)}
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stdout.write(f'key_sha256 = "{hexdigest}"\n')
    sys.stderr.write(f"key id {digest_key_id(digest)}; for a key with the default access, list the digest in ")
    sys.stderr.write("[gateway] api_key_hashes instead\n")
