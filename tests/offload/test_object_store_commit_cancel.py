"""ObjectStoreOffloader.commit_group when an upload fails beside a cancellation or a bug
(fake staged uploads: the method only needs their blocking commit and discard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from ledger_backend.offload import ObjectStoreUnavailableError
from ledger_backend.offload.object_store import ObjectStoreOffloader


class _Upload:
    def __init__(self, fail: Callable[[], None]) -> None:
        self.key = "ml/x.lwo"
        self._fail = fail
        self.discarded = False

    def commit(self) -> None:
        self._fail()

    def discard(self) -> None:
        self.discarded = True


def _offloader() -> ObjectStoreOffloader:
    return ObjectStoreOffloader(object(), "s3", "s3://fake/")


def _outage() -> None:
    raise ObjectStoreUnavailableError("upload 'ml/x.lwo' failed: timeout")


def test_a_cancellation_beside_a_store_error_reaches_its_scope() -> None:
    """Whichever completion gets the only worker-thread token cancels the caller and fails
    as a store outage does; the other is still waiting for a thread and gets the
    Cancelled. Before, commit_group raised the store error `from None` out of that group,
    dropping the Cancelled (the caller logged a store outage and carried on until its next
    checkpoint); now the Cancelled reaches its scope and both uploads are aborted."""

    async def main() -> None:
        trio.to_thread.current_default_thread_limiter().total_tokens = 1
        with trio.CancelScope() as scope:
            def cancel_then_fail() -> None:
                trio.from_thread.run_sync(scope.cancel)
                _outage()

            uploads: list[Any] = [_Upload(cancel_then_fail), _Upload(cancel_then_fail)]
            await _offloader().commit_group(uploads)
        assert scope.cancelled_caught
        assert all(u.discarded for u in uploads)

    trio.run(main)


def test_a_bug_beside_a_store_error_is_not_hidden_as_an_outage() -> None:
    async def main() -> None:
        def bug() -> None:
            raise KeyError("a bug")

        uploads: list[Any] = [_Upload(_outage), _Upload(bug)]
        with pytest.RaisesGroup(KeyError):
            await _offloader().commit_group(uploads)
        assert all(u.discarded for u in uploads)

    trio.run(main)


def test_store_errors_alone_are_raised_as_one() -> None:
    async def main() -> None:
        uploads: list[Any] = [_Upload(_outage), _Upload(_outage)]
        with pytest.raises(ObjectStoreUnavailableError):
            await _offloader().commit_group(uploads)
        assert all(u.discarded for u in uploads)

    trio.run(main)
