"""Weights through files: every replica loads a written version; a restarted replica gets the current one.

    sync = DiskSync(fleet, wire, files, api_key, sync_timeout_s, counters)
    with sync.lock:                               # a weight sync and a restarted replica's load, one at a time
        path = files.write(state_dict, version)
        sync.version = version
        sync.push_all(path, version)              # every replica, or RolloutServerError naming the one that refused
        files.keep_only(path)
    version, failure = sync.load_current(url)     # the supervisor's hook, from a worker thread

The lock keeps a restarted replica's load and a weight sync apart: without it the sync deleted the folder the
restarted replica was loading (`keep_only`), or both loaded one version into it and the second was refused as not
increasing; either failure made the supervisor kill the fresh replica and start it once more. Under the lock,
`load_current` asks the replica which version it holds (rlrm's embedded server and SGLang say): one that already
holds the current trained version, loaded by a sync that reached it first, is left as it is (version 0, its own
files, is loaded again: a replica restarted with --wait-for-weights serves only after a load).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlrm.call_errors import RequestTimeout, TransientError
from rlrm.errors import RolloutServerError
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.replica_info import held_version
from rlrm.launch.client.wire import post_sync_call
from rlrm.launch.fleet.server_fleet import ServerFleet


class DiskSync:
    """Loads written weight versions into the fleet's replicas; see the module docstring.

    Args:
        counters: the engine's counters; a dead replica skipped counts in `rollout/sync_skipped`.
    """

    def __init__(
        self,
        fleet: ServerFleet,
        wire,
        files: WeightFiles,
        api_key: str | None,
        sync_timeout_s: float,
        counters: dict[str, int],
    ):
        self.fleet, self.wire, self.files, self.api_key = fleet, wire, files, api_key
        self.sync_timeout_s, self.counters = sync_timeout_s, counters
        self.lock = threading.Lock()
        self.version = 0  # the version of `files.current` (0: the policy's own files)

    def push_all(self, path, version: int) -> None:
        """Load `version` from `path` into every replica; a dead launched one is skipped (its restart loads it)."""
        urls = list(self.fleet.replica_urls)
        with ThreadPoolExecutor(max_workers=max(1, len(urls))) as pool:
            outcomes = list(pool.map(lambda u: self.push_one(u, path, version, may_be_dead=True), urls))
        for url, failure in zip(urls, outcomes):
            if failure is not None:
                raise RolloutServerError(f"rollout replica {url} refused weights version {version}: {failure}")

    def push_one(self, url: str, path, version: int, may_be_dead: bool = False) -> str | None:
        """Load version `version` into one replica; None when done (or skipped: dead, restarted later), else why not."""
        for call, payload in self.wire.sync_calls(str(path), version):
            try:
                failure = post_sync_call(url, call, payload, self.wire, self.api_key, self.sync_timeout_s)
            except RequestTimeout:  # the replica is up but slower than the setting allows: name the setting
                return (
                    f"no answer to {call} within rollout.server.sync_timeout_s={self.sync_timeout_s:g} s; raise it to "
                    "the time a replica takes to load the weights"
                )
            except TransientError as exc:
                if may_be_dead and self.dead(url):
                    self.counters["rollout/sync_skipped"] += 1
                    return None  # the supervisor restarts it and loads the current version first
                return str(exc)  # names the call and the connection error
            if failure:
                return failure
        return None

    def dead(self, url: str) -> bool:
        """A launched replica that is down or being restarted (its restart loads the current version). False for
        any other URL: the router in front (the fleet restarts it, and it takes no weights) is no replica of the
        pool, and `not pool.alive(router)` once made every failed request wait for a replica restart that never
        came (rlrm/launch/client/rollout_engine.py)."""
        pool = self.fleet.pool
        return pool is not None and url in pool.urls and (url in pool.restarting or not pool.alive(url))

    def load_current(self, url: str) -> tuple[int, str | None]:
        """The current version into a restarted replica, unless it holds it already: (that version, None when it
        took, else why not). Blocks while a weight sync runs."""
        with self.lock:
            version = self.version
            # a replica restarted with --wait-for-weights holds version 0 (its own files) and serves only after a load:
            # only a later version in place means a sync loaded it already
            if (
                version > 0
                and self.wire.carries_version
                and held_version(url, self.api_key, self.sync_timeout_s) == version
            ):
                return version, None
            path: Path | str | None = self.files.current
            if path is None:  # nothing trained yet: the base weights are the current ones
                path = self.fleet.model_path
            return version, self.push_one(url, path, version)

    def reset_trained(self, versions: dict[str, int | None]) -> None:
        """Running servers still holding another run's trained weights get the policy's own back (version 0).
        vLLM reports no version, so its replicas always get them (a hand-started one may have served a run)."""
        for url, version in versions.items():
            if not version and self.wire.carries_version:
                continue
            held = f"weight version {version}" if version else "weights of unknown version (vLLM reports none)"
            if not Path(self.fleet.model_path).is_dir():
                if not version:
                    continue  # a hub id: nothing local to load, trust the server's own
                raise RolloutServerError(
                    f"rollout replica {url} serves {held}, not the policy's initial weights, and "
                    f"{self.fleet.model_path} is no local folder to load them from: restart that server"
                )
            failure = self.push_one(url, self.fleet.model_path, 0)
            if failure is not None:
                raise RolloutServerError(
                    f"rollout replica {url} serves {held} and refused the policy's initial weights: {failure}"
                )
