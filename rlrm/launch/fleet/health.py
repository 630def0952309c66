"""Checks that running servers a run was given can do their job, before the run starts.

    await check_servers(["http://10.0.0.5:8000"], role="disrm", api_key=None, model="rm", timeout_s=180)

A server passes when `/health` answers 200 (an OpenAI-compatible API without `/health`: `GET /v1/models`) and one tiny request to its role's endpoint answers in
that endpoint's shape: a DisRM must serve `/classify`, a judge (genrm) `/v1/chat/completions`.
Connection errors, 5xx and 429 are retried until `timeout_s` (a server may still be loading), and what the
last try got is said on stderr every 10 s while waiting (rlrm/launch/common/progress.py); a 4xx is an answer
(wrong role, wrong key, unknown model) and fails at once, as do a hosted API's model list without the model
and a TLS certificate that does not verify. The error is one line naming the address and what failed, so a
run with dead or wrong servers stops before training.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from typing import Any, Callable

from rlrm.launch.common import progress
from rlrm.launch.common.no_proxy import proxy_for
from rlrm.launch.common.roles import Role
from rlrm.launch.fleet.backends import Backend, Probe, backend_for
from rlrm.launch.fleet.process import ServerStartError


async def check_servers(
    urls: list[str],
    role: Role | str,
    api_key: str | None,
    model: str | None,
    timeout_s: float,
    request_timeout_s: float = 30.0,
    what: str = "reward.server.addresses",
    served_model_name: str | None = None,
    headers: dict[str, str] | None = None,
    backend: Backend | str = "embedded",
    alive: Callable[[str], bool] | None = None,
) -> None:
    """Return when every server in `urls` is healthy and serves `role`'s endpoint as `backend` serves it (a vLLM
    policy: /v1/completions, others /generate; rlrm/launch/fleet/backends.py) and, when `served_model_name` is
    given, lists that name in its /v1/models; else ServerStartError. `headers` go with every probe. `alive(url)`:
    whether the process behind a launched url still runs; a failed probe of one that has exited is final (a dead
    replica is not retried until start_timeout_s)."""
    import aiohttp

    role = Role(role)
    probe = backend_for(backend).probe(role)

    headers = {**(headers or {}), **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    async with aiohttp.ClientSession(headers=headers) as session:
        outcomes = await asyncio.gather(
            *(
                _check_one(
                    session,
                    url.rstrip("/"),
                    role,
                    probe,
                    model,
                    timeout_s,
                    request_timeout_s,
                    what.rsplit(".", 1)[0],
                    functools.partial(alive, url) if alive is not None else None,
                )
                for url in urls
            )
        )
        if served_model_name:  # a wrong name is the likelier cause of a failed probe too (vLLM answers 404)
            names = await asyncio.gather(
                *(_check_name(session, url.rstrip("/"), served_model_name, what.rsplit(".", 1)[0]) for url in urls)
            )
            outcomes = [n if n and (not o or n.startswith("it serves")) else o for o, n in zip(outcomes, names)]
    for i, (url, failure) in enumerate(zip(urls, outcomes)):
        if failure:
            raise ServerStartError(f"{what}[{i}] {url} cannot serve {role.served}: {failure}")


async def _check_one(
    session,
    url: str,
    role: Role,
    probe: Probe,
    model: str | None,
    timeout_s: float,
    request_timeout_s: float,
    section: str,
    alive: Callable[[], bool] | None = None,
) -> str | None:
    """None when the server passes, else what failed last."""
    path, body = probe.path, probe.body
    start = time.monotonic()
    deadline, said, last = start + timeout_s, start, ""
    while True:
        # a port that accepts and never answers must not hold the check past start_timeout_s
        probe_s = min(request_timeout_s, max(1.0, deadline - time.monotonic()))
        failure, final = await _probe(session, url, path, body(model), probe_s, section, model, probe)
        if failure is None and role.takes_weights:
            return await _not_a_policy(session, url, probe_s, section)
        if failure is None or final:
            return failure
        if alive is not None and not alive():
            return f"{failure} (its process has exited)"
        if not (last and probe_s < request_timeout_s and failure.startswith("no answer")):
            last = failure  # a probe cut short by the deadline says less than the full one before it
        now = time.monotonic()
        if now > deadline:
            return f"{last} (still after {timeout_s:g} s: {section}.start_timeout_s)"
        if now - said >= progress.EVERY_S:  # what it got, while waiting: not a silent start_timeout_s
            said = now
            progress.say(
                f"  ... {url}: {last}; trying again for {deadline - now:.0f} s more ({section}.start_timeout_s)"
            )
        await asyncio.sleep(0.5)


async def _probe(
    session,
    url: str,
    path: str,
    body: dict,
    timeout_s: float,
    section: str = "reward.server",
    model: str | None = None,
    probe: Probe | None = None,
) -> tuple[str | None, bool]:
    """(what failed or None, whether that failure is final). `probe`, the request's own: its hint follows a 400 or
    404 (how to serve the role on its backend), its shape check judges a 200."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        ready = await _ready(session, url, timeout, section, model)
        if ready is not None:
            return ready
        async with session.post(url + path, json=body, timeout=timeout, proxy=proxy_for(url)) as resp:
            status, text = resp.status, await resp.text()
    except asyncio.TimeoutError:
        return f"no answer in {timeout_s:g} s", False
    except aiohttp.ClientSSLError as exc:  # a certificate nobody trusts stays untrusted: retrying cannot help
        return tls_failure(exc), True
    except aiohttp.ClientError as exc:
        return f"{type(exc).__name__}: {exc}", False
    if status in (401, 403):
        return (
            f"POST {path} answered {status} ({_message(text)}): set {section}.api_key_env to the variable holding its key",
            True,
        )
    if status in (501, 505):  # the server does not do this at all (an HTTP server that is no inference server)
        return f"POST {path} answered {status}: {_message(text)}: is this an inference server?", True
    if status >= 500 or status == 429:
        return f"POST {path} answered {_status(status)}: {_message(text)}", False
    if status >= 400:
        hint = probe.refused_hint if probe is not None and status in (400, 404) else ""
        return f"POST {path} answered {status}: {_message(text)}{hint}", True
    if not _has_shape(path, text, probe.answered if probe is not None else None):
        return f"POST {path} answered 200 but not in the {path} shape: {text[:120]!r}", True
    return None, True


async def _served_models(session, url: str, timeout_s: float) -> list[dict]:
    """The `data` list of GET /v1/models (each entry a served model: `id`, and `role` on rlrm's own server)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with session.get(url + "/v1/models", timeout=timeout, proxy=proxy_for(url)) as resp:
        resp.raise_for_status()
        return list((await resp.json(content_type=None)).get("data", []))


async def _not_a_policy(session, url: str, timeout_s: float, section: str) -> str | None:
    """Why a server that answers /generate is not a policy server (rlrm's embedded server names its role in
    /v1/models: a judge generates too, but takes no weights), else None (other servers name no role)."""
    import aiohttp

    try:
        role = (await _served_models(session, url, timeout_s))[0].get("role")
    except (asyncio.TimeoutError, aiohttp.ClientError, ValueError, IndexError, TypeError, AttributeError):
        return None  # no role to read: the first weight sync tells
    if role is None or role == Role.POLICY:
        return None
    return (
        f"it serves role {role!r}, which takes no weights; point {section}.addresses at policy servers (--role policy)"
    )


async def _check_name(session, url: str, name: str, section: str) -> str | None:
    """None when GET /v1/models lists `name`, else the one line naming both names."""
    import aiohttp

    try:
        ids = [m.get("id") for m in await _served_models(session, url, 30.0)]
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, TypeError, AttributeError) as exc:
        return f"GET /v1/models failed ({type(exc).__name__}), so {section}.served_model_name cannot be checked"
    if name in ids:
        return None
    return (
        f"it serves {', '.join(map(repr, ids)) or 'no model'}, not {section}.served_model_name {name!r}; "
        "set that key to the name it serves"
    )


async def _ready(session, url: str, timeout, section: str, model: str | None = None) -> tuple[str, bool] | None:
    """None when the server says it is ready: `/health` answers 200, or, on an OpenAI-compatible API that has no
    `/health` (404), `GET /v1/models` answers 200 with the bearer key and lists `model` (when given). A 401/403/404
    there, or a list without the model, is final."""
    async with session.get(url + "/health", timeout=timeout, proxy=proxy_for(url)) as resp:
        if resp.status == 200:
            return None
        if resp.status != 404:
            return f"GET /health answered {_status(resp.status)}", False
    async with session.get(url + "/v1/models", timeout=timeout, proxy=proxy_for(url)) as resp:
        status, text = resp.status, await resp.text()
    if status == 200:
        return _unlisted(text, model, section)
    if status in (401, 403):
        return (
            f"GET /v1/models answered {status} ({_message(text)}): set {section}.api_key_env to the variable "
            "holding its key",
            True,
        )
    if status == 404:
        return "serves neither GET /health nor GET /v1/models (404): is the address its API's base URL?", True
    return f"GET /v1/models answered {_status(status)}: {_message(text)}", False


def _unlisted(text: str, model: str | None, section: str) -> tuple[str, bool] | None:
    """The final failure of a hosted API's model list that does not name `model` (None when it does, when no model
    is asked for, or when the answer is no list to read: the probe request then tells)."""
    try:
        ids = [m["id"] for m in json.loads(text)["data"]]
    except (ValueError, KeyError, TypeError):
        return None
    if model is None or model in ids or not all(isinstance(i, str) for i in ids):
        return None
    shown = ", ".join(map(repr, ids[:8])) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "") or "no model"
    return (
        f"GET /v1/models lists {shown}, not {model!r}; set {section}.model (or {section}.served_model_name) to a "
        "model this API serves",
        True,
    )


def _status(status: int) -> str:
    """A status code with what it means where the number alone misleads (429: rate limited, not down)."""
    return f"{status} (rate limited)" if status == 429 else str(status)


def tls_failure(exc: Exception) -> str:
    """One line for a failed TLS handshake: the certificate's problem in OpenSSL's words, and what to do."""
    import ssl

    cause = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None) or exc
    said = cause.verify_message if isinstance(cause, ssl.SSLCertVerificationError) else None
    if said:
        return (
            f"its TLS certificate failed verification ({said}); if you trust it, add its CA to a PEM bundle and "
            "set SSL_CERT_FILE to that file before starting rlrm"
        )
    reason = getattr(cause, "reason", None) or type(cause).__name__
    return f"the TLS handshake failed ({reason}); is it served over https at this port?"


def _has_shape(path: str, text: str, answered: Callable[[Any], bool] | None = None) -> bool:
    """Whether a 200's body is in the path's shape: `answered`'s judgement where the probe has one (a DisRM's
    /classify: vLLM's `{"data": [{"probs"}]}`, SGLang's `{"embedding"}`; rlrm/launch/fleet/backends.py)."""
    try:
        out = json.loads(text)
        if answered is not None:
            return answered(out)
        if path == "/classify":
            return isinstance(out["data"][0]["probs"], list)
        if path == "/generate":
            out = out[0] if isinstance(out, list) else out
            return isinstance(out["output_ids"], list) and "output_token_logprobs" in out["meta_info"]
        if path == "/v1/completions":
            return "text" in out["choices"][0]
        return "message" in out["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return False


_TAGS = re.compile(r"<[^>]*>")


def _message(text: str) -> str:
    """The error message of an OpenAI-style, vLLM-style or FastAPI-style error body, else the text."""
    try:
        out = json.loads(text)
        err = out.get("error", out) if isinstance(out.get("error"), dict) else out
        return str(err.get("message") or err.get("detail") or text)[:200]
    except Exception:
        return " ".join(_TAGS.sub(" ", text).split())[:200] or "(empty body)"  # an HTML page: its words, one line
