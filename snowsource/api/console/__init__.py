"""The operator console: one static page at ``GET /console`` over the REST API and ``/metrics``.

The page, its stylesheet, its script and its icon ship in this package and are read once when
the server is built; nothing is rendered per request, so the page carries no data and needs no
token (it asks for one when the API answers 401). Every asset goes out with a strict
Content-Security-Policy: scripts and styles only from the daemon's own origin, no inline code,
no framing — what the API returns can never run in the operator's browser.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "PAGE_PATH", "PATHS", "Console"]

PAGE_PATH: Final = "/console"
# Served below the page's path, so the page's relative links also work behind a proxy prefix.
ASSETS: Final = {
    PAGE_PATH: ("index.html", "text/html"),
    f"{PAGE_PATH}/console.css": ("console.css", "text/css"),
    f"{PAGE_PATH}/console.js": ("console.js", "text/javascript"),
    f"{PAGE_PATH}/icon.svg": ("icon.svg", "image/svg+xml"),
}
#: The paths that need no bearer token: the page must load before it can ask for one.
PATHS: Final = frozenset(ASSETS)

CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # An upgraded daemon must not run last version's script against its new API.
    "Cache-Control": "no-cache",
}


class Console:
    """The console's assets, read from the package once."""

    def __init__(self) -> None:
        files = resources.files(__package__)
        self._bodies = {
            path: (files.joinpath(name).read_bytes(), content_type)
            for path, (name, content_type) in ASSETS.items()
        }

    @property
    def paths(self) -> frozenset[str]:
        """The console's paths, open without a token."""
        return PATHS

    def add_routes(self, app: web.Application) -> None:
        """Register ``GET`` for every asset."""
        for path in self._bodies:
            app.router.add_get(path, self.serve)

    async def serve(self, request: web.Request) -> web.Response:
        """One asset, with the console's security headers."""
        body, content_type = self._bodies[request.path]
        return web.Response(body=body, content_type=content_type, charset="utf-8", headers=_HEADERS)
