"""The collections file (docs/reference.md §6): every way it can be wrong is refused with a message naming the collection
and the field, first by shape and then against the live catalog; and key templates read keys back exactly."""
from __future__ import annotations

import re

import pytest

from blobgc.core.collections import (
    CollectionsError,
    KeyTemplate,
    bind,
    load_collections,
    parse_collections,
    select,
)
from blobgc.kinds.blobs import APP_BLOB
from tests.support.collections import bound_shop, create_shop, new_schema, shop_yaml

GOOD = """
collections:
  uploads:
    table: shop.upload
    id: id
    keys: ["uploads/{sha}.{ext}"]
"""


def one(body: str, name: str = "uploads") -> str:
    return f"collections:\n  {name}:\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())


@pytest.mark.parametrize(("text", "expected"), [
    ("collections: [", "is not valid YAML"),
    ("uploads:\n  table: a.b\n", "must be a mapping with one key, `collections`"),
    ("collections: {}\n", "`collections` is empty"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id}']", name="Uploads"),
     "collection 'Uploads', field 'name': 'Uploads' is not a collection name"),
    (one("table: upload\nid: id\nkeys: ['u/{id}']"),
     "collection 'uploads', field 'table': 'upload' is not a schema-qualified table name"),
    (one("table: shop.upload\nid: 'id; drop'\nkeys: ['u/{id}']"), "collection 'uploads', field 'id': "),
    (one("table: shop.upload\nid: id"), "collection 'uploads', field 'keys': Field required"),
    (one("table: shop.upload\nid: id\nkeys: []"), "collection 'uploads', field 'keys': "),
    (one("table: shop.upload\nid: id\nkeys: ['{id}/raw']"), "field 'keys': '{id}/raw' must start with literal text"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{sha}{ext}']"), "placeholders must be separated by literal text"),
    (one("table: shop.upload\nid: id\nkeys: ['u/raw']"), "has no {placeholder}"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id!r}']"), "may not have a format or conversion"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id.x}']"), "must be a plain column name"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id}']\ngrace_hours: -1"),
     "collection 'uploads', field 'grace_hours': Input should be greater than or equal to 0"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id}']\ncolour: red"), "field 'colour': Extra inputs are not"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id}']\nbucket: No_Such"), "field 'bucket': 'No_Such' is not a bucket"),
    (one("table: shop.upload\nid: id\nkeys: ['u/{id}']\nconn_id: a\ns3_conn_id: b"),
     "collection 'uploads', field '(the collection itself)': give conn_id only: s3_conn_id is its older name"),
    ("collections:\n  a:\n    table: s.a\n    id: id\n    keys: ['u/{id}']\n    conn_id: blobgc_gcs\n"
     "  b:\n    table: s.b\n    id: id\n    keys: ['v/{id}']\n",
     "collection 'b', field 'conn_id': bucket 'blobgc' is reached through 'blobgc_s3' here and through 'blobgc_gcs' "
     "by collection 'a'; one bucket name has one connection"),
    ("collections:\n  a:\n    table: s.a\n    id: id\n    keys: ['u/{id}']\n"
     "  a:\n    table: s.b\n    id: id\n    keys: ['v/{id}']\n", "'a' is given twice"),
    ("collections:\n  a:\n    table: s.a\n    id: id\n    keys: ['u/{id}']\n"
     "  b:\n    table: s.b\n    id: id\n    keys: ['u/x/{id}']\n",
     "collection 'b', field 'keys': prefix 'u/x/' overlaps collection 'a''s prefix 'u/' in bucket 'blobgc'"),
])
def test_a_malformed_collections_file_is_refused_naming_the_collection_and_field(text, expected):
    with pytest.raises(CollectionsError) as refused:
        parse_collections(text)
    assert expected in str(refused.value)


def test_two_collections_may_share_a_bucket_under_different_prefixes_or_a_prefix_in_different_buckets():
    text = ("collections:\n  a:\n    table: s.a\n    id: id\n    keys: ['u/{id}']\n"
            "  b:\n    table: s.b\n    id: id\n    keys: ['v/{id}']\n"
            "  c:\n    table: s.c\n    id: id\n    bucket: other-bucket\n    keys: ['u/{id}']\n")
    assert list(parse_collections(text)) == ["a", "b", "c"]


def test_conn_id_names_the_store_and_s3_conn_id_is_still_read_as_its_older_name():
    """Issue 33: `conn_id` (default blobgc_s3) names the connection whose type picks the store; a file written
    before other stores, with `s3_conn_id`, reads the same."""
    text = ("collections:\n  a:\n    table: s.a\n    id: id\n    keys: ['u/{id}']\n"
            "  b:\n    table: s.b\n    id: id\n    bucket: gcs_bucket-1\n    conn_id: blobgc_gcs\n    keys: ['v/{id}']\n"
            "  c:\n    table: s.c\n    id: id\n    bucket: old\n    s3_conn_id: other_s3\n    keys: ['w/{id}']\n")
    found = parse_collections(text)
    assert {n: (c.bucket, c.conn_id) for n, c in found.items()} == {
        "a": (None, "blobgc_s3"), "b": ("gcs_bucket-1", "blobgc_gcs"), "c": ("old", "other_s3")}


def test_a_missing_file_names_itself_and_the_variable(tmp_path):
    with pytest.raises(CollectionsError, match="cannot read the collections file .*set BLOBGC_COLLECTIONS"):
        load_collections(tmp_path / "nope.yaml")


def test_the_param_may_only_name_declared_collections():
    found = parse_collections(GOOD)
    assert select(found, None) == [found["uploads"]]
    with pytest.raises(CollectionsError, match=r"Param collections names \['nope'\]"):
        select(found, ["nope"])


def test_the_default_file_declares_app_blob_as_the_contract_does():
    assert load_collections()["app_blob"] == APP_BLOB


def test_key_templates_read_keys_back_into_typed_column_values(conn, bucket):
    schema = new_schema()
    create_shop(conn, schema)
    bound = bound_shop(conn, schema, bucket)
    sha = "a" * 64
    assert bound.parse_key(f"uploads/{sha}.png")[1] == {"sha": sha, "ext": "png"}
    assert bound.parse_key("upload-thumbs/42.jpg")[1] == {"id": "42"}
    assert bound.parse_key("upload-thumbs/x42.jpg") is None  # no bigint's text form is x42
    assert bound.parse_key("upload-thumbs/042.jpg") is None  # nor 042: bigint 42 forms upload-thumbs/42.jpg
    assert bound.parse_key("uploads/a/b.png")[1] == {"sha": "a/b", "ext": "png"}  # a text value may hold /
    assert bound.keys_of({"id": 42, "sha": sha, "ext": "png"}) == [f"uploads/{sha}.png", "upload-thumbs/42.jpg"]
    assert bound.keys_of({"id": 42, "sha": None, "ext": "png"}) == ["upload-thumbs/42.jpg"]  # NULL forms no key
    repeated = KeyTemplate.parse_template("m/{id}/{id}.x")
    assert repeated.readings("m/1/1.x") == [{"id": "1"}] and repeated.readings("m/1/2.x") == []


@pytest.mark.parametrize(("template", "key", "expected"), [
    ("studio/{checksum}.{kind}", "studio/abc.tar.gz", [{"checksum": "abc", "kind": "tar.gz"},
                                                       {"checksum": "abc.tar", "kind": "gz"}]),
    ("u/{owner}_{name}", "u/alice_my_cat.jpg", [{"owner": "alice", "name": "my_cat.jpg"},
                                                {"owner": "alice_my", "name": "cat.jpg"}]),
    ("files/{path}", "files/2024/05/cat.jpg", [{"path": "2024/05/cat.jpg"}]),
    ("files/{path}", "other/2024", []),
])
def test_ambiguous_separator_a_key_has_every_reading_its_template_allows(template, key, expected):
    assert KeyTemplate.parse_template(template).readings(key) == expected


@pytest.mark.parametrize("template", ["m/{x}.bin", "m/{x}", "a/{x}a", "ab{x}ba", "u/{x}/raw"])
def test_a_one_placeholder_template_reads_a_key_as_a_full_match_of_its_literals_would(template):
    """`readings`' shortcut for prefix{column}suffix (the drain's guard reads every owed key) gives what the
    general search gives: the value between the literals, or nothing, for keys made to trip it."""
    parsed = KeyTemplate.parse_template(template)
    (prefix, name), (suffix, _) = parsed.parts
    pattern = re.compile(re.escape(prefix) + "(.*)" + re.escape(suffix), re.S)
    digits = {name: str.isdigit}
    for key in ["m/1.bin", "m/.bin", "m/a/b.bin", "m/1.bin.bin", "m/", "m", "a/a", "a/aa", "a/", "aba", "abba",
                "abxba", "u/7/raw", "u//raw", "u/raw", "u/7/raw/raw", "m/\n.bin", "", "m/12"]:
        match = pattern.fullmatch(key)
        assert parsed.readings(key) == ([{name: match.group(1)}] if match else []), key
        fitting = match is not None and match.group(1).isdigit()
        assert parsed.readings(key, digits) == ([{name: match.group(1)}] if fitting else []), key


def test_ambiguous_separator_a_template_whose_placeholders_cannot_be_told_apart_is_refused_naming_it():
    with pytest.raises(CollectionsError, match=r"collection 'uploads', field 'keys': 'u/{sha}{ext}': placeholders "
                                               r"must be separated by literal text: {sha}{ext} cannot be told apart"):
        parse_collections(one("table: shop.upload\nid: id\nkeys: ['v/{id}', 'u/{sha}{ext}']"))


@pytest.mark.parametrize(("template", "key", "expected"), [
    ("u/{a}{{x}}/{b}", "u/foo{x}/bar", [{"a": "foo", "b": "bar"}]),  # {{ }} are literal braces
    ("u/{a}{{x}}/{b}", "u/foo{", []),
    ("a{{b}}/{x}", "a{b}/1", [{"x": "1"}]),
])
def test_ambiguous_separator_escaped_braces_are_literal_text(template, key, expected):
    parsed = KeyTemplate.parse_template(template)
    assert parsed.readings(key) == expected
    assert parsed.format({"a": "foo", "b": "bar", "x": "1"}) == key if expected else True


def test_app_blob_on_app_blob_may_only_declare_seed_000s_keys():
    with pytest.raises(CollectionsError, match="collection 'app_blob', field 'keys': app_blob on app.blob keeps "
                                               "seed 000's objects"):
        parse_collections(one("table: app.blob\nid: id\nkeys: ['blobs/{filename}/raw']", name="app_blob"))


@pytest.mark.parametrize("prefix", ["pastes/", "mail/", "blobs/", "images/ab/", "past"])
def test_seed_prefix_overlap_a_collection_under_a_seed_layouts_prefix_is_refused(conn, tmp_path, monkeypatch, prefix):
    from blobgc.core.keys import load_checked_collections

    path = tmp_path / "collections.yaml"
    path.write_text(one(f"table: shop.upload\nid: id\nkeys: ['{prefix}{{sha}}']"))
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    with pytest.raises(CollectionsError, match=f"collection 'uploads', field 'keys': prefix '{prefix}' overlaps the "
                                               "prefix '.*' of blobgc's own objects of table .* in bucket 'blobgc'"):
        load_checked_collections(conn, default_bucket="blobgc")
    path.write_text(one(f"table: shop.upload\nid: id\nbucket: another-bucket\nkeys: ['{prefix}{{sha}}']"))
    assert list(load_checked_collections(conn, default_bucket="blobgc")) == ["uploads"]  # in a bucket of its own


def test_seed_prefix_overlap_app_blob_is_the_seed_layout_of_its_own_table(conn, monkeypatch):
    from blobgc.core.keys import load_checked_collections

    monkeypatch.delenv("BLOBGC_COLLECTIONS", raising=False)
    assert "app_blob" in load_checked_collections(conn, default_bucket="blobgc")


def test_seed_prefix_overlap_a_seed_layout_whose_table_does_not_exist_holds_no_prefix(conn, tmp_path, monkeypatch):
    from blobgc.core.keys import load_checked_collections

    path = tmp_path / "collections.yaml"
    path.write_text(one("table: shop.upload\nid: id\nkeys: ['mail/{sha}']"))
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    with conn.transaction():
        conn.execute("ALTER TABLE gen.blob RENAME TO blob_elsewhere")
    try:
        assert list(load_checked_collections(conn, default_bucket="blobgc")) == ["uploads"]
    finally:
        with conn.transaction():
            conn.execute("ALTER TABLE gen.blob_elsewhere RENAME TO blob")


@pytest.mark.parametrize(("change", "field", "expected"), [
    ({"table": "{s}.nope"}, "table", "table {s}.nope does not exist"),
    ({"id": "nope"}, "id", "has no column 'nope'"),
    ({"id": "sha"}, "id", "must be the primary key of {s}.upload (or a unique NOT NULL column)"),
    ({"created_at": "sha"}, "created_at", "is text, not a timestamp"),
    ({"size": "ext"}, "size", "is text, not a number"),
    ({"keys": ["uploads/{nope}.x"]}, "keys[0]", "placeholder {nope} of 'uploads/{nope}.x' is not a column"),
    ({"references": ["SELECT sha FROM {s}.upload"]}, "references[0]", "returns a column of type text"),
    ({"references": ["SELECT nope FROM {s}.upload"]}, "references[0]", "fails"),
])
def test_a_collection_that_does_not_match_the_database_is_refused_naming_the_field(conn, change, field, expected):
    schema = new_schema()
    create_shop(conn, schema)
    base = {"table": f"{schema}.upload", "id": "id", "created_at": "created_at", "size": "size_bytes",
            "keys": ["uploads/{sha}.{ext}"]}
    body = {**base, **{k: ([x.replace("{s}", schema) for x in v] if isinstance(v, list) else v.replace("{s}", schema))
                       for k, v in change.items()}}
    text = "collections:\n  uploads:\n" + "".join(f"    {k}: {v!r}\n" for k, v in body.items())
    collection = parse_collections(text)["uploads"]
    with pytest.raises(CollectionsError) as refused:
        bind(conn, collection, default_bucket="blobgc")
    assert f"collection 'uploads', field '{field}'" in str(refused.value)
    assert expected.replace("{s}", schema) in str(refused.value)


def test_the_shop_file_of_the_tests_checks_against_its_schema(conn, bucket):
    schema = new_schema()
    create_shop(conn, schema)
    bound = bind(conn, parse_collections(shop_yaml(schema, bucket))["shop_uploads"], default_bucket="x")
    assert (bound.bucket, bound.id_type) == (bucket, "bigint")


@pytest.mark.parametrize("wrong", [
    "shape", "prefix of a seed", "param names", "table missing", "reference query"])
def test_every_collections_file_error_names_the_files_path(conn, tmp_path, monkeypatch, wrong):
    """Issue 30: an error found reading the file or checking it against the catalog (the DAG's first task,
    `checked_collections`) names the file's path, so that a deployment knows which file to fix."""
    from blobgc.dag_kit.collections import checked_collections

    schema = new_schema()
    create_shop(conn, schema)
    path = tmp_path / "team" / "collections.yaml"
    path.parent.mkdir()
    base = f"table: {schema}.upload\nid: id\nkeys: ['uploads/{{sha}}.{{ext}}']"
    path.write_text({
        "shape": one(f"{base}\ngrace_hours: -1"),
        "prefix of a seed": one(f"table: {schema}.upload\nid: id\nkeys: ['pastes/{{sha}}']"),
        "param names": one(base),
        "table missing": one(f"table: {schema}.nope\nid: id\nkeys: ['uploads/{{id}}']"),
        "reference query": one(f"{base}\nreferences: ['SELECT sha FROM {schema}.upload']"),
    }[wrong])
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    params = {"collections": ["nope"] if wrong == "param names" else None}
    with pytest.raises(CollectionsError) as refused:
        checked_collections(conn, params)
    assert f"collections file {path}" in str(refused.value), str(refused.value)
