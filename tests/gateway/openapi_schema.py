"""OpenAI's published OpenAPI schemas (``tests/fixtures/openai-openapi``) as JSON Schema validators.

The fixture is ``components.schemas`` of OpenAI's ``openapi.json`` (MIT licensed; its ``SOURCE.md`` names the
commit). The document declares OpenAPI 3.1, whose schemas are JSON Schema 2020-12, but some of its schemas still
carry OpenAPI 3.0's ``nullable: true``, which JSON Schema does not know: it is read here as "or null", the way a
client generated from the document reads it. ``discriminator`` and the ``x-*`` extensions are annotations, which
a JSON Schema validator ignores.

Where the document's own examples contradict its schemas, the examples win, because they show what OpenAI's API
sends and what clients already parse; each such case is listed in ``EXAMPLES_WIN`` with the evidence.
"""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openai-openapi" / "openai-openapi-schemas.json.gz"
_BASE = "urn:openai-openapi"

#: Keywords whose value is a map from names to subschemas (the names are not keywords themselves).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def with_nullable_as_null(node: Any) -> Any:
    """``node`` with every ``nullable: true`` schema turned into ``anyOf: [schema, {type: null}]``."""
    if isinstance(node, list):
        return [with_nullable_as_null(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "nullable":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: with_nullable_as_null(sub) for name, sub in value.items()}
        else:
            out[key] = with_nullable_as_null(value)
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


#: Where null is allowed although the schema does not say so (a path inside ``components.schemas``): why.
EXAMPLES_WIN: dict[tuple[str | int, ...], str] = {
    ("ModelResponseProperties", "properties", "user"): (
        'every Response example of the document (ten of them, e.g. ResponseCreatedEvent\'s) has "user": null'
    ),
    ("Response", "allOf", 2, "properties", "usage"): (
        'the examples of ResponseCreatedEvent and ResponseInProgressEvent have "usage": null (a response in progress)'
    ),
}


@cache
def schemas() -> dict[str, Any]:
    """The document's ``components.schemas``, with ``nullable`` read as "or null" and ``EXAMPLES_WIN`` applied."""
    document = orjson.loads(gzip.decompress(FIXTURE.read_bytes()))
    converted: dict[str, Any] = with_nullable_as_null(document["components"]["schemas"])
    for path in EXAMPLES_WIN:
        parent: Any = converted
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = {"anyOf": [parent[path[-1]], {"type": "null"}]}
    return converted


@cache
def _registry() -> Registry[Any]:
    root = Resource.from_contents({"components": {"schemas": schemas()}}, default_specification=DRAFT202012)
    return Registry().with_resource(_BASE, root)


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the component schema ``name`` (its ``$ref``s resolved within the document)."""
    if name not in schemas():
        raise KeyError(f"the OpenAPI document has no schema {name!r}")
    return Draft202012Validator({"$ref": f"{_BASE}#/components/schemas/{name}"}, registry=_registry())


def problems(name: str, body: Any) -> list[str]:
    """Every way ``body`` breaks schema ``name``, each as ``path: message`` (empty when it validates)."""
    found = []
    for error in sorted(validator(name).iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        found.append(_describe(error))
    return found


def _describe(error: ValidationError) -> str:
    """``path: message``; for an ``anyOf`` / ``oneOf`` miss, the problems of the branch whose ``type`` matched."""
    if error.context:
        branches: dict[Any, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        typed = [errs for errs in branches.values() if not any(list(e.relative_path) == ["type"] for e in errs)]
        if typed:
            return "; ".join(_describe(sub) for sub in min(typed, key=len))
        closest = best_match(error.context)
        if closest is not None:
            error = closest
    path = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"{path}: {error.message[:300]}"


def assert_valid(name: str, body: Any) -> None:
    """Fail with every problem when ``body`` does not validate against schema ``name``."""
    found = problems(name, body)
    assert not found, f"{name} rejects the body:\n" + "\n".join(found) + f"\nbody: {orjson.dumps(body)[:2000]!r}"
