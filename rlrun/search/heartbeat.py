"""A search driver's heartbeat: a thread that stamps the search's row with the database's clock
every `heartbeat_seconds()`, whatever the driver is busy with (a trial training in this process, a
pruner's decision, a slow registry), so that any host reads the search as running while its driver
lives and as crashed once it has been silent for the liveness limit (`rlrun.registry.liveness`):
the rule runs and sessions follow, not a pid that only the driver's own host could check.

A driver presumed dead (frozen, cut off from the registry) whose search was meanwhile resumed by
another driver finds, at its next beat, that the row names the other driver: it is superseded, and
records nothing more about the search (`superseded`).

The beat also reads whether `rlrun stop search:` asked the search to stop (`stop_requested`): the
driver then starts no more trials, and each beat asks the search's trials still running to stop
(`Registry.request_search_stop`), a trial the driver started as the request came included.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

from rlrun.errors import RlrunError
from rlrun.registry import Registry
from rlrun.registry.liveness import heartbeat_seconds


class DriverHeartbeat:
    """While entered, beat for search `search_id` driven by (`host`, `pid`)."""

    def __init__(self, root: Path, url: str, search_id: str, *, host: str | None, pid: int | None) -> None:
        self.root, self.url, self.search_id, self.host, self.pid = root, url, search_id, host, pid
        self.superseded = False
        """The search is no longer this driver's: another driver resumed it, or it was ended."""
        self.stop_requested = False
        """`rlrun stop search:` asked the search to stop (seen at a beat)."""
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rlrun-search-heartbeat", daemon=True)

    def __enter__(self) -> DriverHeartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stopped.set()
        self._thread.join()

    def stop_asked(self, registry: Registry) -> bool:
        """Whether `rlrun stop search:` asked the search to stop, read now (the driver asks before
        it starts a trial, so none starts between a request and the next beat)."""
        if not self.stop_requested and registry.search_stop_requested(self.search_id):
            self.stop_requested = True
        return self.stop_requested

    def _beat(self) -> None:
        # Its own connection: a registry connection belongs to the thread that opened it.
        while not self._stopped.wait(heartbeat_seconds()):
            try:
                with Registry.open(self.root, self.url) as registry:
                    while True:
                        if not registry.heartbeat_search(self.search_id, host=self.host, pid=self.pid):
                            self.superseded = True
                            return
                        if self.stop_asked(registry):
                            registry.request_search_stop(self.search_id)
                        if self._stopped.wait(heartbeat_seconds()):
                            return
            except RlrunError:  # the registry was out for longer than its retries: beat again later
                continue
