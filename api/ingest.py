"""Placeholder router; its owner fills it in."""

from fastapi import APIRouter

router = APIRouter()
