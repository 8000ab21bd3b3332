"""The reference query is composed from identifiers, never from f-strings."""
from __future__ import annotations

from blobgc.references import Reference, ReferenceSet, referenced_ids_query


def render(composable) -> str:
    return composable.as_string(None)


def test_foreign_keys_are_quoted_identifiers():
    refs = ReferenceSet((Reference("app", 'odd"name', "blob_id", "fk", True),))
    text = render(referenced_ids_query(refs, "ids"))
    assert '"app"."odd""name"' in text
    assert "= ANY(%(ids)b::text[])" in text


def test_range_scope_binds_bounds():
    refs = ReferenceSet((Reference("app", "t", "c", "fk", True),))
    text = render(referenced_ids_query(refs, "range"))
    assert '"c" >= %(lo)s' in text and "%(hi)s::text IS NULL" in text


def test_extra_sql_percent_signs_are_escaped():
    refs = ReferenceSet((), ("SELECT id FROM app.x WHERE name LIKE 'a%'",))
    text = render(referenced_ids_query(refs, "ids"))
    assert "LIKE 'a%%'" in text


def test_no_references_selects_nothing():
    assert "WHERE false" in render(referenced_ids_query(ReferenceSet(()), "ids"))
