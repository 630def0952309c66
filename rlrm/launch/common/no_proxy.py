"""Loopback traffic never goes through the shell's HTTP proxy; other hosts do, as the user's other tools send them.

Corporate and cluster shells set HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, often to a proxy that cannot reach back to this
machine, and many leave 127.0.0.1 out of NO_PROXY. The clients that read them (requests, httpx, the openai SDK, the
SGLang router) then send a call to a server on 127.0.0.1 to the proxy. rlrm hands out and serves loopback addresses
(its servers, the router, the address a custom reward calls), so it adds loopback to NO_PROXY in its own process and
in every process it launches. Its own aiohttp requests take the proxy per request, and only for an https host name
(a hosted judge), whatever the environment says later.

    direct_loopback(os.environ)          # in place; what was in NO_PROXY is kept
    session.get(url, proxy=proxy_for(url))
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import MutableMapping
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_KEYS = ("NO_PROXY", "no_proxy")


def direct_loopback(env: MutableMapping[str, str]) -> None:
    """Add loopback to `env`'s NO_PROXY and no_proxy (both: clients read one or the other), keeping their entries."""
    have: list[str] = []
    for key in _KEYS:
        for host in (env.get(key) or "").split(","):
            if host.strip() and host.strip() not in have:
                have.append(host.strip())
    if "*" in have:
        return  # every host is direct already
    merged = ",".join(have + [host for host in LOOPBACK if host not in have])
    for key in _KEYS:
        if env.get(key) != merged:
            env[key] = merged


def proxy_for(url: str) -> str | None:
    """The HTTP proxy the shell's variables name for `url`, or None. Only an https URL to a host name goes through a
    proxy (a hosted API: `https://api.openai.com/v1`); rlrm's own servers, Ray replicas by node address and cluster
    servers answer plain http or at an IP address, which a corporate proxy cannot reach, so they stay direct, as
    they always were. A host NO_PROXY lists stays direct too, and so does everything when the proxy is one aiohttp
    cannot speak to (socks)."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme != "https" or host is None or host in LOOPBACK or _is_ip(host):
        return None
    proxies = urllib.request.getproxies_environment()
    if urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]  # not in typeshed
        return None
    proxy = proxies.get("https") or proxies.get("all")
    return proxy if proxy and urlsplit(proxy).scheme in ("http", "https") else None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
