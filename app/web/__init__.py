"""The web layer: FastAPI pages and JSON API. Knows runs only through Trace documents; never
imports torch or user code."""
