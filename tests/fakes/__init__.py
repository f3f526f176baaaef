"""Test doubles that speak real protocols (HTTP, SSE) rather than mocks."""
