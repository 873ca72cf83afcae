"""``JobBook`` (translators/nomad/views.py): the keys its views are held under, and what a
listing and a job-deletion event do to a job this agent purged while its allocations stop
(docs/design/nomad.md, "Delete")."""

from __future__ import annotations

from typing import Any

import pytest

from translators.base import OWNER_KEY, OWNER_VALUE
from translators.nomad.jobs import META_NAME, META_NAMESPACE, META_NODE, META_UID
from translators.nomad.views import JobBook, view_key

NODE = "vk-1"


def job(name: str, *, index: int = 10) -> dict[str, Any]:
    return {
        "ID": f"default-{name}",
        "Namespace": "default",
        "Region": "global",  # what Nomad answers whatever region the request named
        "Status": "running",
        "Stop": False,
        "ModifyIndex": index,
        "Meta": {
            OWNER_KEY: OWNER_VALUE,
            META_NODE: NODE,
            META_NAMESPACE: "default",
            META_NAME: name,
            META_UID: f"uid-{name}",
        },
    }


def alloc(name: str, status: str, *, index: int) -> dict[str, Any]:
    return {
        "ID": f"a-{name}",
        "JobID": f"default-{name}",
        "Namespace": "default",
        "ClientStatus": status,
        "ModifyIndex": index,
    }


@pytest.mark.parametrize("region", ["", "global", "eu"])
def test_a_view_is_held_under_the_key_it_names(region: str) -> None:
    """Scope region "" (the agent's own) and a job that says "global": the view is held,
    and found for removal, under one key (before, ``view_key`` said "global" while the book
    held it under "", and every listing dropped the views it had just merged)."""
    book = JobBook(NODE)
    view = book.merge_job(job("web"), region=region)
    assert view is not None
    assert book.views == {view_key(view): view}
    views = book.apply_listing(region, "default", [job("web")], [], index=10)
    assert views == [view] and book.views == {view_key(view): view}


def test_a_listing_keeps_a_job_this_agent_purged_until_its_allocations_end() -> None:
    book = JobBook(NODE)
    mine = book.merge_job(job("mine"), region="")
    other = book.merge_job(job("other"), region="")
    assert mine is not None and other is not None
    mine.purged = mine.stop = True
    # Nomad lists neither job (both purged) but still the purged job's stopping allocation
    views = book.apply_listing("", "default", [], [alloc("mine", "running", index=20)], index=30)
    assert views == [mine]  # listed, with its allocation: not vanished
    assert mine.allocs["a-mine"]["ClientStatus"] == "running"
    assert list(book.views.values()) == [mine]  # the job purged by someone else is forgotten


async def test_a_deleted_job_event_keeps_a_job_this_agent_purged() -> None:
    book = JobBook(NODE)
    mine = book.merge_job(job("mine"), region="")
    other = book.merge_job(job("other"), region="")
    assert mine is not None and other is not None
    mine.purged = mine.stop = True

    async def view_for(jid: str, ns: str, region: str) -> Any:
        return book.views.get((region, ns, jid))

    events = [
        {"Topic": "Job", "Payload": {"Job": {**job(name, index=40)}, "Deleted": True}}
        for name in ("mine", "other")
    ]
    _touched, deleted = await book.apply_events(events, region="", view_for=view_for)
    assert deleted == [other] and list(book.views.values()) == [mine]
    # a late update of the job (older than its purge) cannot make it live again
    await book.apply_events(
        [{"Topic": "Job", "Payload": {"Job": job("mine", index=50)}}],
        region="",
        view_for=view_for,
    )
    assert mine.stop is True
