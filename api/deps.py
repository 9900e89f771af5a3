"""FastAPI dependencies: what a route needs, taken from the app's state."""

from __future__ import annotations

import hmac

import httpx
from fastapi import HTTPException, Request, status

from api.settings import Settings
from collector.store import Store


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_http(request: Request) -> httpx.AsyncClient:
    return request.app.state.http


def _check_bearer(request: Request, expected: str, what: str) -> None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail=f"{what} requires 'Authorization: Bearer <token>' with the configured token",
            headers={"WWW-Authenticate": "Bearer"},
        )


def require_ingest_token(request: Request) -> None:
    token = get_settings(request).ingest_token
    if token is not None:
        _check_bearer(request, token.get_secret_value(), "ingest")


def require_admin(request: Request) -> None:
    token = get_settings(request).admin_token
    if token is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail="admin endpoints are disabled: set FORESHOCK_ADMIN_TOKEN to enable them",
        )
    _check_bearer(request, token.get_secret_value(), "this admin endpoint")
