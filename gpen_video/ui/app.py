"""The desk's HTTP face: the page, its files, and a JSON API over the library. Bound to the
loopback address it serves whoever can reach it there, as a local tool does; bound to any other
address, every request must carry the token printed at start (``?token=`` once, then a cookie)."""

from __future__ import annotations

import secrets
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import GpenVideoError, OutsideFolders, error_line
from .folders import Folders
from .library import Library

TOKEN_COOKIE = "gpen_video_token"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class TokenRequired(BaseHTTPMiddleware):
    """Refuses every request without the token (a query parameter, then a cookie)."""

    def __init__(self, app, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
        if not secrets.compare_digest(given, self.token):
            return JSONResponse({"error": "this desk needs the token printed when it started (?token=...)"},
                                status_code=401)
        response = await call_next(request)
        if "token" in request.query_params:
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
        return response


def _error(exc: GpenVideoError) -> JSONResponse:
    """A refused request: the same one line the command line gives."""
    status = 404 if isinstance(exc, OutsideFolders) else 400
    return JSONResponse({"error": error_line(exc)}, status_code=status)


def create_app(folders: Folders, host: str, token: str | None = None) -> Starlette:
    """The desk over ``folders``; bound to ``host``, which decides whether ``token`` is asked for.
    Its handlers read files, so they are plain functions, which Starlette runs on its threads."""
    library = Library(folders)

    def index(request: Request) -> Response:
        return FileResponse(_static() / "index.html")

    def list_library(request: Request) -> Response:
        return JSONResponse({"folders": [str(root) for root in folders.roots],
                             "files": [entry.as_json() for entry in library.entries()]})

    def thumbnail(request: Request) -> Response:
        try:
            path = folders.resolve(request.query_params.get("file", ""))
            if not path.is_file():
                raise OutsideFolders(f"no such file in the desk's folders: {request.query_params.get('file')}")
            data = library.thumbnail(path)
        except GpenVideoError as exc:
            return _error(exc)
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-cache"})

    middleware = [] if host in LOOPBACK else [Middleware(TokenRequired, token=token or "")]
    if host not in LOOPBACK and not token:
        raise ValueError("a desk bound beyond the loopback address needs a token")
    return Starlette(routes=[Route("/", index), Route("/api/library", list_library),
                             Route("/api/thumbnail", thumbnail),
                             Mount("/static", StaticFiles(directory=_static()), name="static")],
                     middleware=middleware)


def _static() -> Path:
    return Path(str(resources.files(__package__) / "static"))
