"""The source map beside an original: where each line of a document's Markdown is, kept right or dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp.store import KbPaths, Mark, SourceMap, read_source_map, source_map_bytes, span_location
from coffer_mcp.store.locations import describe, merge, valid_location

BODY = "# Report\n\nFirst page text.\nStill page one.\n\nSecond page text.\n\nThird page text."
PLACES = [None, None, {"page": 1}, {"page": 1}, None, {"page": 2}, None, {"page": 3}]


def test_a_source_map_reads_back_as_written() -> None:
    written = SourceMap.of(BODY, PLACES)
    assert SourceMap.parse(written.to_bytes()) == written
    assert written.places_of(BODY) == PLACES


def test_a_text_files_lines_are_stored_as_one_run_not_one_entry_a_line() -> None:
    body = "\n".join(f"line {n}" for n in range(1, 1001))
    data = source_map_bytes(body, [{"line": n} for n in range(1, 1001)])
    assert data is not None
    assert b'"places":[[1,1000,{"line":1},1]]' in data
    assert SourceMap.parse(data).places_of(body)[999] == {"line": 1000}  # type: ignore[union-attr]


def test_a_body_without_any_place_gets_no_source_map() -> None:
    assert source_map_bytes("# Page\n\nText.", [None, None, None]) is None


def test_lines_moved_by_an_edit_keep_their_place_and_new_or_changed_lines_have_none() -> None:
    source_map = SourceMap.of(BODY, PLACES)
    edited = "# Report\n\nThird page text.\n\nA paragraph written by hand.\n\nFirst page text.\nStill page one!"
    places = source_map.places_of(edited)
    assert places[2] == {"page": 3}  # moved up: still from page 3
    assert places[4] is Mark.UNMATCHED  # written by hand: in no page of the original
    assert places[6] == {"page": 1}
    assert places[7] is Mark.UNMATCHED  # changed
    assert span_location(places, 3, 3) == {"page": 3}
    assert span_location(places, 5, 7) is None  # a passage holding new text has no location


def test_a_passage_over_two_pages_names_both() -> None:
    places = SourceMap.of(BODY, PLACES).places_of(BODY)
    assert span_location(places, 3, 6) == {"pages": [1, 2]}


_HEAD = b'{"format": "coffer-source-map", "version": 1, "content_sha256": "x", '


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"format": "coffer-source-map", "version": 99}',
        _HEAD + b'"lines": 2, "hashes": "00", "places": []}',
        _HEAD + b'"lines": 1, "hashes": "00000000", "places": [[1, 5, {"page": 1}]]}',
        _HEAD + b'"lines": 1, "hashes": "00000000", "places": [[1, 1, {"page": "<script>"}]]}',
    ],
)
def test_a_damaged_or_foreign_source_map_is_no_source_map(data: bytes, tmp_path: Path) -> None:
    kb = KbPaths("notes", tmp_path)
    kb.raw.mkdir()
    kb.source_map("01J00000000000000000000000").write_bytes(data)
    assert read_source_map(kb, "01J00000000000000000000000") is None


def test_locations_merge_into_ranges_a_sheet_and_a_shared_heading() -> None:
    assert merge([{"page": 3}, None, {"pages": [1, 2]}]) == {"pages": [1, 3]}
    assert merge([{"sheet": "Q4"}, {"sheet": "Q4", "row": 12}, {"sheet": "Q4", "rows": [13, 40]}]) == {
        "sheet": "Q4",
        "rows": [12, 40],
    }
    assert merge([{"sheet": "Q1", "row": 2}, {"sheet": "Q4", "row": 2}]) == {"sheets": ["Q1", "Q4"]}
    assert merge([{"heading": ["Terms", "Payment"]}, {"heading": ["Terms", "Delivery"]}]) == {"heading": ["Terms"]}
    assert merge([{"page": 1}, {"slide": 1}]) is None


def test_a_location_reads_as_a_citation() -> None:
    assert [describe(x) for x in ({"page": 37}, {"pages": [36, 37]}, {"sheet": "Q4", "rows": [12, 40]})] == [
        "p. 37",
        "pp. 36\u201337",
        "sheet Q4, rows 12\u201340",
    ]
    assert describe({"lines": [120, 148]}) == "lines 120\u2013148"
    assert describe({"heading": ["Terms", "Payment"]}) == "\u00a7 Terms > Payment"


def test_only_the_shapes_coffer_writes_are_locations() -> None:
    assert valid_location({"sheet": "Q4", "rows": [1, 2]})
    assert not valid_location({"pages": [3, 1]})
    assert not valid_location({"page": True})
    assert not valid_location({"page": 1, "slide": 2})
    assert not valid_location({"part": "attachment"})
