"""The API's documentation pages: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), whose files come
from the package ``fastapi-offline`` under ``DOCS_ASSETS``, never from a CDN: a server without
internet shows them, and no request of theirs leaves the service. Each page has a
Content-Security-Policy that lets it load nothing from elsewhere (ReDoc's bundle asks its
vendor's site for a logo: the policy stops that request in the browser) and run no script but
its bundle and its own inline start (by its hash)."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = "/docs-assets"
"""Where /docs and /redoc find Swagger UI's and ReDoc's files (served from the package)."""
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _with_policy(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a policy that allows its inline scripts by their hashes and nothing else
    inline but styles (ReDoc writes its styles into the page)."""
    body = bytes(page.body).decode()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in _INLINE_SCRIPT.findall(body))
    policy = (f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline';"
              " img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self';"
              " object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
    return HTMLResponse(body, headers={"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff",
                                       "Referrer-Policy": "same-origin"})


def add_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` (the app is made with ``docs_url=None, redoc_url=None``)."""
    assets = files("fastapi_offline") / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    swagger = _with_policy(get_swagger_ui_html(
        openapi_url=openapi_url, title=f"{app.title} - Swagger UI", swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css", swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None}))  # no badge from the validator's site
    redoc = _with_policy(get_redoc_html(
        openapi_url=openapi_url, title=f"{app.title} - ReDoc", redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
        redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png", with_google_fonts=False))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(swagger.body, headers=dict(swagger.headers))

    @app.get("/redoc", include_in_schema=False)
    async def redoc_page() -> HTMLResponse:
        return HTMLResponse(redoc.body, headers=dict(redoc.headers))
