"""The dashboard at /dashboard: static HTML/CSS/JS from `strixlm/router/dashboard/` (no build
step, nothing from a CDN) plus the JSON endpoints of `api_dashboard.py`."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from strixlm.router.api_dashboard import build_dashboard_api
from strixlm.router.server_state import RouterRuntime

DASHBOARD_DIR = Path(__file__).with_name("dashboard")
# The page changes with every edit of the package; let the browser revalidate each load.
NO_CACHE = {"Cache-Control": "no-cache"}


def mount_dashboard(app: FastAPI, runtime: RouterRuntime) -> None:
    index = DASHBOARD_DIR / "index.html"

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    @app.api_route("/dashboard", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard_bare() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    @app.api_route("/dashboard/", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard_page() -> FileResponse:
        return FileResponse(index, media_type="text/html", headers=NO_CACHE)

    app.mount("/dashboard/static", StaticFiles(directory=DASHBOARD_DIR), name="dashboard-static")
    app.include_router(build_dashboard_api(runtime))
