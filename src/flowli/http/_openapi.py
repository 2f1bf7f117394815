"""The service's OpenAPI document: generated from the routes, with the errors every route may
answer (and no 422: bad input is a 400 here) and the models of the bodies the routes read
themselves, after the credential (``_body.json_body``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from . import _models as m
from ._body import BODIES

_ERRORS = {
    "400": "malformed or invalid body (the error names the field)",
    "401": "no or unknown credential",
    "403": "the credential's role does not allow this",
    "404": "no such id in this application",
    "409": "conflict",
    "413": "body too large",
    "503": "not confirmed: send it again",
}


def document(app: FastAPI) -> None:
    """Make ``app``'s document this one (built at its first request, then kept)."""

    def openapi() -> dict[str, Any]:
        """The generated document, with the errors every route may answer (and no 422: bad
        input is a 400 here)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            error_ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas["Error"] = m.Error.model_json_schema()
            # the bodies the routes read themselves (after the credential): see ``json_body``
            _, bodies = models_json_schema([(model, "validation") for model in BODIES.values()],
                                           ref_template="#/components/schemas/{model}")
            schemas.update(bodies.get("$defs", {}))
            for path, methods in doc["paths"].items():
                for op in methods.values():
                    responses = op.setdefault("responses", {})
                    responses.pop("422", None)
                    for code, why in _ERRORS.items():
                        if path == "/healthz" or path == "/openapi.json":
                            continue
                        responses.setdefault(code, {"description": why, **error_ref})
            doc["components"]["schemas"].pop("HTTPValidationError", None)
            doc["components"]["schemas"].pop("ValidationError", None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
