"""blobgc.generations without a database: blob ids and the salted reference filter."""
from __future__ import annotations

import hashlib

import pytest

from blobgc.generations import ReferenceFilter, blob_id_for, generation_of


def test_blob_ids_embed_the_generation_and_the_content_hash():
    digest = hashlib.sha256(b"mail body").hexdigest()
    assert blob_id_for(digest, 7) == f"{digest}-g7"
    assert blob_id_for(digest, 7) != blob_id_for(digest, 8)
    assert generation_of(blob_id_for(digest, 12)) == 12
    for foreign in ("b1", f"{digest}-gx", f"{digest[:10]}-g3", "abc-g-1"):
        assert generation_of(foreign) is None


def ids(n: int, tag: str) -> list[str]:
    return [blob_id_for(hashlib.sha256(f"{tag}{i}".encode()).hexdigest(), 1) for i in range(n)]


def test_filter_has_no_false_negatives_and_meets_its_memory_goal():
    members = ids(100_000, "member")
    refs = ReferenceFilter.empty(len(members), 0.01)
    refs.add(members)
    assert all(b in refs for b in members)
    assert refs.references == len(members)
    assert refs.size_bytes / (len(members) / 1e6) <= 1.5e6  # at most 1.5 MB per million at 1%
    strangers = ids(100_000, "stranger")
    rate = sum(b in refs for b in strangers) / len(strangers)
    assert rate < 0.015


def test_salts_give_independent_false_positives():
    members, strangers = ids(2_000, "member"), ids(20_000, "stranger")

    def false_positives(salt: str) -> set[str]:
        refs = ReferenceFilter.empty(len(members), 0.1, salt)
        refs.add(members)
        return {b for b in strangers if b in refs}

    first, again, other = false_positives("run A:"), false_positives("run A:"), false_positives("run B:")
    assert first == again  # one salt, one filter: the same garbage would be protected every time
    assert first and other
    assert len(first & other) < len(first) * 0.3  # another salt keeps mostly other blobs (about 10% overlap)


def test_a_filter_refuses_an_impossible_rate():
    with pytest.raises(ValueError):
        ReferenceFilter.empty(10, 1.5)
