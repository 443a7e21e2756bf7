"""Lock order in the PostgreSQL keystore: a usage reservation (``reserve_usage``) and a deletion
of the same key (``delete_key``), from two stores (two processes' views), each stopped by hand in
the middle of its transaction while the other runs into its locks. Both take the key's own row
first (the reservation FOR SHARE, the deletion FOR UPDATE), so whichever came first finishes and
the other follows: the reservation is counted before the deletion removes it, or finds the key
gone. Before, the reservation locked the key's version 1 and then its usage row, the deletion
the usage row and then the versions: a deadlock, answered 503 on one side or the other
(issue 24, item 7: found by tests/service/server/test_key_identity.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any

import pytest

from sealflow.engine import Algorithm
from sealflow.service.keystore import KeyNotFound, PostgresKeyStore

from .test_postgres import eventually, rows


class Paused:
    """A connection that stops after the first statement that starts with ``after``, until
    ``go`` is set (``reached`` says it stopped there). Everything else is the real connection."""

    def __init__(self, db: Any, after: str, reached: threading.Event, go: threading.Event) -> None:
        self._db, self._after, self._reached, self._go = db, after, reached, go

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = self._db.execute(sql, params)
        if sql.startswith(self._after) and not self._reached.is_set():
            self._reached.set()
            assert self._go.wait(30)
        return cursor


class PausingStore(PostgresKeyStore):
    """A real PostgreSQL store whose next write transaction stops after one statement
    (``Paused``)."""

    def __init__(self, url: str, master_key: bytes) -> None:
        self.after = ""
        self.reached, self.go = threading.Event(), threading.Event()
        super().__init__(url, master_key, watch=False)

    @contextmanager
    def _transaction(self, changes: bool = True) -> Iterator[Any]:
        with super()._transaction(changes) as db:
            if not self.after:
                yield db
                return
            after, self.after = self.after, ""
            yield Paused(db, after, self.reached, self.go)


def waiting_on_a_lock(url: str) -> bool:
    """Whether a session of the test's database waits for a row lock another holds."""
    found = rows(
        url,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    return bool(found[0][0])


Outcome = dict[str, object]


def run(name: str, call: Callable[[], object], outcome: Outcome) -> threading.Thread:
    def target() -> None:
        try:
            outcome[name] = call()
        except Exception as exc:  # the test looks at what each side got
            outcome[name] = exc

    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread


# What stops first, and after which statement: the reservation after its first (the key's
# identity, checked under a lock), the deletion after it removed the key's usage rows.
ORDERS = {
    "reservation-first": ("reserve", "SELECT 1 FROM"),
    "deletion-first": ("delete", "DELETE FROM sealflow_usage"),
}


@pytest.mark.parametrize("first", list(ORDERS))
def test_a_reservation_and_a_deletion_of_one_key_never_deadlock(
    pg_url: str, master_key: bytes, first: str
) -> None:
    with (
        closing(PostgresKeyStore(pg_url, master_key)) as store,
        closing(PausingStore(pg_url, master_key)) as paused,
        closing(PostgresKeyStore(pg_url, master_key, watch=False)) as other,
    ):
        store.create_key("k", Algorithm.AES_256_GCM, max_encryptions=50)
        store.configure("k", deletion_allowed=True)
        slot = store.get_key("k").slot(1)
        assert store.reserve_usage(slot, 1, 50) == (1, 1)  # the usage row both will lock
        who, after = ORDERS[first]
        paused.after = after
        firsts: dict[str, Callable[[], object]] = {
            "reserve": lambda: paused.reserve_usage(slot, 1, 50),
            "delete": lambda: paused.delete_key("k"),
        }
        seconds: dict[str, Callable[[], object]] = {
            "reserve": lambda: other.reserve_usage(slot, 1, 50),
            "delete": lambda: other.delete_key("k"),
        }
        then = "delete" if who == "reserve" else "reserve"
        outcome: Outcome = {}
        one = run(who, firsts[who], outcome)
        assert paused.reached.wait(30)
        two = run(then, seconds[then], outcome)
        # The second runs into a lock the first holds (or finishes, if it needs none).
        eventually(lambda: not two.is_alive() or waiting_on_a_lock(pg_url), within=30)
        paused.go.set()
        one.join(60)
        two.join(60)
    deleted, reserved = outcome["delete"], outcome["reserve"]
    assert not isinstance(deleted, Exception), repr(deleted)  # a deadlock was a 503 here
    assert deleted is not None
    if first == "reservation-first":
        assert reserved == (1, 2)  # counted, then deleted with the key
    else:
        assert isinstance(reserved, KeyNotFound), repr(reserved)  # not a deadlock's 503
    assert rows(pg_url, "SELECT count(*) FROM sealflow_usage") == [(0,)]
    assert rows(pg_url, "SELECT count(*) FROM sealflow_keys WHERE name = 'k'") == [(0,)]
