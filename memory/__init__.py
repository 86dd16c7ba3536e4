"""Scriptorium `memory` package (see docs/architecture.md)."""

__all__: list[str] = []
