"""The desk's HTTP face: the page, its files, and a JSON API over the library, the surveys and
the previews. Bound to the loopback address it serves whoever can reach it there, as a local
tool does; bound to any other address, every request must carry the token printed at start
(``?token=`` once, then a cookie)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
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
from ..settings import load_settings, save_settings, saved_settings
from .desk import Desk, parse_tracks
from .library import Library, estimated_frames

TOKEN_COOKIE = "gpen_video_token"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
#: Outputs a browser's player may play (whether it can depends on the codec: the page tries).
PLAYABLE = {".mp4", ".m4v", ".mov", ".webm", ".jpg", ".jpeg", ".png", ".webp"}


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


def create_app(desk: Desk, host: str, token: str | None = None) -> Starlette:
    """The page over ``desk``; bound to ``host``, which decides whether ``token`` is asked for.
    Its handlers read files and wait for the engine, so they are plain functions, which
    Starlette runs on its threads."""
    folders = desk.folders
    library = Library(folders)

    def file_of(request: Request) -> Path:
        name = request.query_params.get("file", "")
        path = folders.resolve(name)
        if not path.is_file():
            raise OutsideFolders(f"no such file in the desk's folders: {name}")
        return path

    def index(request: Request) -> Response:
        return FileResponse(_static() / "index.html")

    def list_library(request: Request) -> Response:
        """Every file of the folders, with the state of its latest render."""
        latest: dict[str, str] = {}
        for render in reversed(desk.queue.renders()):  # oldest first: the latest wins
            latest[str(render["input"])] = render["state"]
        files = [entry.as_json() | {"render": latest.get(str(folders.resolve(entry.name)))}
                 for entry in library.entries()]
        return JSONResponse({"folders": [str(root) for root in folders.roots], "files": files})

    def thumbnail(request: Request) -> Response:
        try:
            data = library.thumbnail(file_of(request))
        except GpenVideoError as exc:
            return _error(exc)
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "no-cache"})

    def survey(request: Request) -> Response:
        """GET: the clip's survey (404 before one is started); POST: start it (or find it started)."""
        try:
            path = file_of(request)
            found = desk.survey(path, start=request.method == "POST")
        except GpenVideoError as exc:
            return _error(exc)
        if found is None:
            return JSONResponse({"error": "no survey of this clip yet"}, status_code=404)
        return JSONResponse(found.as_json(folders.name_of(path)))

    def face(request: Request) -> Response:
        try:
            found = desk.survey(file_of(request))
            track = int(request.query_params.get("track", ""))
            if found is None:
                raise KeyError(track)
            return Response(found.face_picture(track), media_type="image/jpeg")
        except GpenVideoError as exc:
            return _error(exc)
        except (KeyError, ValueError):
            return JSONResponse({"error": "no such track in the clip's survey"}, status_code=404)

    def still(request: Request) -> Response:
        """The frame at ``time`` restored with the page's options; the JSON names its two pictures."""
        query = request.query_params
        try:
            time = float(query.get("time", "0"))
        except ValueError:
            return JSONResponse({"error": "time is a number of seconds"}, status_code=400)
        try:
            path = file_of(request)
            options = desk.options_for(query)
            key, panel = desk.still(path, time, parse_tracks(query.get("tracks", "all")), options)
        except GpenVideoError as exc:
            return _error(exc)
        height, width = panel.original.shape[:2]
        return JSONResponse({"time": panel.time, "width": width, "height": height,
                             "faces": [{"box": [round(float(v), 1) for v in box.box], "track": box.label,
                                        "restored": box.restored} for box in panel.boxes],
                             "decoded": f"/api/picture?key={key}&view=decoded",
                             "restored": f"/api/picture?key={key}&view=restored"})

    def picture(request: Request) -> Response:
        try:
            data = desk.picture(request.query_params.get("key", ""), request.query_params.get("view", ""))
        except KeyError:
            return JSONResponse({"error": "that preview is no longer kept; ask for it again"}, status_code=404)
        return Response(data, media_type="image/png")

    def render(request: Request) -> Response:
        """Queue the file with the page's settings (refused at once if one is wrong)."""
        query = request.query_params
        try:
            path = file_of(request)
            tracks = parse_tracks(query.get("tracks", "all"))
            numbers = {name: float(query[name]) for name in ("start", "end", "strength", "smooth") if query.get(name)}
            settings = {"tracks": sorted(tracks) if tracks is not None else None, **numbers,
                        "mask": query.get("mask", desk.options.mask)}
            number = desk.queue.add(path, settings, estimated_frames(path))
        except GpenVideoError as exc:
            return _error(exc)
        except ValueError:
            return JSONResponse({"error": "start, end, strength and smoothing are numbers"}, status_code=400)
        return JSONResponse({"id": number})

    def renders(request: Request) -> Response:
        """The queue, the latest first: each render's state, progress and outcome."""
        shown = []
        for render in desk.queue.renders():
            record = render["record"] or {}
            output = render["output"]
            shown.append({"id": render["id"], "file": folders.name_of(render["input"]),
                          "output": folders.name_of(output) if output.exists() else output.name,
                          "state": render["state"], "done": render["done"], "total": render["total"],
                          "settings": render["settings"], "error": record.get("error"),
                          "warnings": record.get("warnings", []), "frames": record.get("frames"),
                          "faces": record.get("faces"), "seconds": record.get("seconds"),
                          "resumed_at": record.get("resumed_at_frame"),
                          "plays": render["state"] == "done" and output.suffix.lower() in PLAYABLE})
        return JSONResponse({"renders": shown})

    def media(request: Request) -> Response:
        """A file of the folders as it is, for the page's player (ranges answered)."""
        try:
            return FileResponse(file_of(request))
        except GpenVideoError as exc:
            return _error(exc)

    def settings(request: Request) -> Response:
        """GET: the settings saved so far; POST: the page's strength, mask and smoothing saved as ``name``."""
        query = request.query_params
        try:
            if request.method == "POST":
                values = desk.options_for(query)
                save_settings(query.get("name", ""), {name: getattr(values, name)
                                                      for name in ("strength", "mask", "smooth")})
            return JSONResponse({"saved": {name: load_settings(name) for name in saved_settings()}})
        except GpenVideoError as exc:
            return _error(exc)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        desk.close()

    middleware = [] if host in LOOPBACK else [Middleware(TokenRequired, token=token or "")]
    if host not in LOOPBACK and not token:
        raise ValueError("a desk bound beyond the loopback address needs a token")
    return Starlette(routes=[Route("/", index), Route("/api/library", list_library),
                             Route("/api/thumbnail", thumbnail), Route("/api/survey", survey, methods=["GET", "POST"]),
                             Route("/api/face", face), Route("/api/still", still), Route("/api/picture", picture),
                             Route("/api/render", render, methods=["POST"]), Route("/api/renders", renders),
                             Route("/api/media", media), Route("/api/settings", settings, methods=["GET", "POST"]),
                             Mount("/static", StaticFiles(directory=_static()), name="static")],
                     middleware=middleware, lifespan=lifespan)


def _static() -> Path:
    return Path(str(resources.files(__package__) / "static"))
