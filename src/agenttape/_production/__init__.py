"""Capture in production: runs, the writer behind the request path, stores and stored runs."""
