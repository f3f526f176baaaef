"""Chainlit-side rendering helpers for app.py (backend/ never imports Chainlit)."""
