"""Helpers shared by the suites that take Apache Kafka as the reference."""

import time

from kqclient import REMOVE

SETTLE_TIMEOUT_S = 15


def clear_all(*sides):
    """Removes every configured key on each side (a QuotaClient), waiting until Kafka's broker shows it."""
    for side in sides:
        entries = side.everything(1)
        if entries:
            side.alter(1, [(tuple(k), [(q, REMOVE) for q in vals]) for k, vals in entries.items()]).assert_ok()
        settle(lambda: not side.everything(1), "every quota removed")


def settle(done, what):
    """Kafka's broker shows a committed alteration a little later: wait (bounded) until `done()`."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker did not show {what} within {SETTLE_TIMEOUT_S} s")
        time.sleep(0.01)


def wait_values(side, entity, values):
    """Waits until `entity` (pairs) holds exactly `values` on this side."""
    settle(lambda: side.values_of(1, entity) == values, f"{values} for {entity}")
