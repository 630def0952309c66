"""The embedded server's model endpoints: completions, chat completions, SGLang /generate, vLLM /classify.

What they share (the backend, the in-flight bound, decoding, route registration) is in endpoints.py; each area
in its own file: completions.py, generate.py, classify.py.
"""

from __future__ import annotations

from rlrm.launch.server.classify import add_classify_route
from rlrm.launch.server.completions import add_completion_routes
from rlrm.launch.server.endpoints import Endpoints, json_response_class
from rlrm.launch.server.generate import add_generate_route

__all__ = ["add_routes", "json_response_class"]


def add_routes(app, cfg, backend) -> None:
    ep = Endpoints(app, cfg, backend)
    add_completion_routes(ep)
    add_generate_route(ep)
    add_classify_route(ep)
