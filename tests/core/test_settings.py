"""blobgc.core.settings: validation of Variables and Params, with a clear error for each kind of bad value."""
from __future__ import annotations

import pytest

from blobgc.core.settings import check_image_sizes


@pytest.mark.parametrize("sizes", [
    {"orig": 0, "big": 1280, "medium": 640, "thumb": 160},
    {"x2": 2560, "thumb_160": 160},
])
def test_image_size_names_of_lower_case_ascii_are_accepted(sizes):
    check_image_sizes(sizes)


@pytest.mark.parametrize("name", [
    "größe", "миниатюра", "ｔｈｕｍｂ", "thumb\u200b",  # non-ASCII, full-width, a zero-width space
    "../thumb", "a/b", "thumb.jpg", "..", "", " thumb", "thumb\n", "Thumb", "big-1",  # path-like or odd
])
def test_image_size_names_that_are_odd_are_refused_with_a_clear_error(name):
    with pytest.raises(ValueError) as refused:
        check_image_sizes({"orig": 0, name: 160})
    message = str(refused.value)
    assert "blobgc_image_sizes" in message and repr(name) in message and "[a-z0-9_]+" in message


@pytest.mark.parametrize("sizes", [{}, [], {"thumb": -1}, {"thumb": 1.5}, {"thumb": True}, {"thumb": "160"}])
def test_image_size_names_need_whole_non_negative_edges(sizes):
    with pytest.raises(ValueError, match="blobgc_image_sizes"):
        check_image_sizes(sizes)
