"""Loopback bypasses the shell's HTTP proxy (rlrm/launch/common/no_proxy.py): NO_PROXY and no_proxy gain loopback,
what they held is kept, and `*` (every host direct) is left alone."""

from __future__ import annotations

from urllib.request import proxy_bypass_environment

from rlrm.launch.common.no_proxy import direct_loopback


def test_loopback_is_added_and_what_was_there_kept():
    env = {"NO_PROXY": "localhost,.corp.example", "no_proxy": "10.0.0.1", "HTTP_PROXY": "http://proxy:3128"}
    direct_loopback(env)
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,.corp.example,10.0.0.1,127.0.0.1,::1"
    read = {"no": env["no_proxy"]}  # as urllib (and aiohttp, requests, httpx after it) reads the variables
    assert proxy_bypass_environment("127.0.0.1", read) and proxy_bypass_environment("localhost", read)
    assert not proxy_bypass_environment("api.example.com", read)  # a hosted judge still goes through the proxy
    again = dict(env)
    direct_loopback(again)
    assert again == env  # idempotent
    empty: dict[str, str] = {}
    direct_loopback(empty)
    assert empty["NO_PROXY"] == "127.0.0.1,localhost,::1"
    star = {"NO_PROXY": "*"}
    direct_loopback(star)
    assert star == {"NO_PROXY": "*"}


def test_rlrms_own_requests_take_the_proxy_for_other_hosts_only(monkeypatch):
    from rlrm.launch.common.no_proxy import proxy_for

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "")  # loopback left out, as many shells do
    monkeypatch.setenv("no_proxy", "")
    assert proxy_for("https://api.example.com/v1") is None  # no proxy set: direct
    monkeypatch.setenv("https_proxy", "http://proxy.corp:3128")
    monkeypatch.setenv("http_proxy", "http://proxy.corp:3128")
    assert proxy_for("https://api.example.com/v1") == "http://proxy.corp:3128"
    for url in ("http://127.0.0.1:8000/health", "http://localhost:9/x", "http://[::1]:80/", "http://127.0.0.2:1/"):
        assert proxy_for(url) is None, url  # whatever NO_PROXY says
    # rlrm's servers elsewhere (Ray replicas by node address, a cluster's judge) stay direct, as they always were
    for url in ("http://10.0.3.7:8000/v1", "https://10.0.3.7:8443/v1", "http://judge-node-3:8000/v1"):
        assert proxy_for(url) is None, url
    monkeypatch.setenv("no_proxy", ".example.com")
    assert proxy_for("https://api.example.com/v1") is None
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.setenv("https_proxy", "socks5://proxy.corp:1080")  # aiohttp speaks no socks: direct, not an error
    assert proxy_for("https://api.example.com/v1") is None
