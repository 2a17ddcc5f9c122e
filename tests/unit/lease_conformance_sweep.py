"""The Lease store's conformance cases for the roster's and the sweeps' calls (see ``lease_conformance``).

The hand-off and roster (``driver.membership``, ``driver.firstterm``, ``kube.coordination``) merge
annotations over a version and read from the watch cache; the sweeps
(``kube.sweep``, ``injector.sweep``) list by label and delete over the
version they judged, the injector's in every namespace.
"""

from __future__ import annotations

import asyncio

import pytest

from sidecar.core import roster
from sidecar.core.lease import lease_object
from sidecar.kube.errors import ApiError, Conflict, NotFound
from sidecar.kube.sweep import SELECTOR
from tests.unit.lease_conformance import (
    NAME,
    OTHER,
    TIMEOUT,
    Every,
    Store,
    case,
    new,
    over,
    renew,
    rv,
)


@case()
async def test_a_merge_patch_of_annotations(store: Store, every: Every) -> None:
    """Over a version: annotations set and (None) removed, the rest kept; over an older one:
    409; with no version: over whatever is there; a version of null: refused (422); of an
    absent Lease: 404 (``Coordination.merge`` then creates it)."""
    made = await store.create(new(store, "a", keep="1", drop="2"))
    patched = await store.patch(NAME, over(made, add="3", drop=None))
    assert patched["metadata"]["annotations"] == {"keep": "1", "add": "3"}
    assert patched["spec"] == made["spec"] and rv(patched) > rv(made)
    assert patched["metadata"]["labels"] == made["metadata"]["labels"]
    assert patched["metadata"]["uid"] == made["metadata"]["uid"]
    with pytest.raises(Conflict):
        await store.patch(NAME, over(made, add="4"))
    loose = await store.patch(NAME, {"metadata": {"annotations": {"late": "5"}}})
    assert loose["metadata"]["annotations"] == {"keep": "1", "add": "3", "late": "5"}
    with pytest.raises(ApiError) as refused:
        await store.patch(NAME, {"metadata": {"annotations": {"x": "6"}, "resourceVersion": None}})
    assert refused.value.status == 422, refused.value
    with pytest.raises(NotFound):
        await store.patch(roster.NAME, {"metadata": {"annotations": {"x": "7"}}})


@case()
async def test_a_list_by_label_finds_the_managed_leases(store: Store, every: Every) -> None:
    """The sweep's list: the Leases labelled managed-by grelmicro, not the coordination Lease
    (managed-by grelmicro-sidecar) nor one without the label."""
    await store.create(new(store, "a"))
    await store.create(new(store, "b", name=OTHER))
    await store.create(roster.new_object(store.namespace, {"k": "v"}))
    await store.create(lease_object("plain", store.namespace, {}))
    items, version = await store.list(label_selector=SELECTOR)
    assert sorted(i["metadata"]["name"] for i in items) == sorted([NAME, OTHER])
    assert int(version) >= max(rv(i) for i in items)
    assert len((await store.list())[0]) == 4


@case()
async def test_a_delete_goes_over_the_version_judged_only(store: Store, every: Every) -> None:
    """A sweep judged on an older version deletes nothing (409); over the current one the Lease
    is gone; again: 404."""
    made = await store.create(new(store, "a"))
    renewed = await store.replace(renew(made))
    with pytest.raises(Conflict):
        await store.delete(NAME, str(rv(made)))
    assert await store.get(NAME) == renewed
    await store.delete(NAME, str(rv(renewed)), namespace=store.namespace)
    assert await store.get(NAME) is None
    with pytest.raises(NotFound):
        await store.delete(NAME, str(rv(renewed)))


@case()
async def test_a_cached_read_catches_up_with_a_write(store: Store, every: Every) -> None:
    """A read from the watch cache (the roster's) may lag a write, not for long."""
    renewed = await store.replace(renew(await store.create(new(store, "a"))))
    async with asyncio.timeout(TIMEOUT):
        while (seen := await store.get(NAME, cached=True)) is None or rv(seen) < rv(renewed):
            await asyncio.sleep(0.05)
    assert seen == renewed


@case(fake="the fake holds one namespace; the injector's store lists and deletes in all")
async def test_the_store_of_every_namespace(store: Store, every: Every) -> None:
    """The injector's sweep: a list by label of every namespace, a delete naming the namespace."""
    assert every is not None
    made = await store.create(new(store, "a"))
    items, _ = await every.list(label_selector=SELECTOR)
    mine = [i["metadata"] for i in items if i["metadata"]["namespace"] == store.namespace]
    assert [(m["name"], m["resourceVersion"]) for m in mine] == [(NAME, str(rv(made)))]
    with pytest.raises(Conflict):
        await every.delete(NAME, str(rv(made) - 1), namespace=store.namespace)
    await every.delete(NAME, str(rv(made)), namespace=store.namespace)
    assert await store.get(NAME) is None
