"""Malformed, truncated and hostile files: a typed rejection (or a safe document), and the server goes on.

Truncated and malformed PDF / DOCX / XLSX files, a DOCX zip bomb and a conversion that outlives
``conversion_timeout`` run in the converter's worker process; each is refused with
``conversion_failed`` (or converts to a harmless document), nothing is written on refusal, and
the next conversion works — through the service and through MCP.
"""

from __future__ import annotations

import base64

import anyio
import pytest
from mcp import Client

from coffer_mcp import Coffer
from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import build_server
from tests.reliability.nasty_files import docx, docx_bomb, nasty_files
from tests.reliability.support import Store, tool_error_code, truth_files

NASTY = nasty_files()
REFUSALS = {"conversion_failed", "empty", "scanned_pdf"}


def converts_again(coffer: Coffer) -> None:
    """A genuine DOCX still converts: the worker that failed (or was killed) has been replaced."""
    added = coffer.add_document("notes", "genuine.docx", docx(["Genuine text about herons."]))
    assert "herons" in coffer.read_document("notes", added.document_id).markdown
    coffer.delete_document("notes", added.document_id)


@pytest.mark.parametrize("name", sorted(NASTY))
def test_a_malformed_or_truncated_office_file_or_pdf_is_refused_cleanly_or_stored_as_a_harmless_document(
    store: Store, name: str
) -> None:
    try:
        added = store.coffer.add_document("notes", name, NASTY[name])
    except CofferError as exc:
        assert exc.code in REFUSALS, exc
        assert exc.hint
        assert store.changed() == []
        return
    # Some damage leaves readable text (a PDF that is really HTML, an unclosed tag): a normal document.
    assert all(t.intact for t in truth_files(store.home))
    store.coffer.delete_document("notes", added.document_id)
    assert store.changed() == []


def test_a_docx_zip_bomb_is_refused_by_the_capped_converter_and_the_next_conversion_works(store: Store) -> None:
    bomb = docx_bomb(expanded_mb=300)  # 300 MB of text in a 300 KB file; the worker may use 512 MB
    with pytest.raises(CofferError) as refused:
        store.coffer.add_document("notes", "bomb.docx", bomb)
    assert refused.value.code == "conversion_failed"
    assert store.changed() == []
    converts_again(store.coffer)
    assert store.changed() == []


def test_a_conversion_that_outlives_conversion_timeout_is_stopped_and_the_next_one_works(store: Store) -> None:
    # A genuine DOCX that takes seconds to convert stands in for a file that hangs the converter.
    slow = docx([f"Paragraph {i} about herons, tides and lighthouses." for i in range(10_000)])
    impatient = Coffer(store.coffer.settings.model_copy(update={"conversion_timeout": 0.5}))
    with impatient, pytest.raises(CofferError) as refused:
        impatient.add_document("notes", "slow.docx", slow)
    assert refused.value.code == "conversion_failed"
    assert "longer than" in refused.value.message
    assert store.changed() == []
    converts_again(store.coffer)
    assert store.changed() == []


@pytest.mark.anyio
async def test_hostile_files_sent_over_mcp_get_tool_errors_and_the_server_keeps_serving(store: Store) -> None:
    files = {**NASTY, "bomb.docx": docx_bomb(expanded_mb=300)}
    with anyio.fail_after(240):
        async with Client(build_server(store.coffer)) as client:
            for name, data in files.items():
                arguments = {
                    "kb": "notes",
                    "filename": name,
                    "content": base64.b64encode(data).decode(),
                    "content_encoding": "base64",
                }
                result = await client.call_tool("coffer__add_document", arguments)
                if result.is_error:
                    assert tool_error_code(result) in REFUSALS, name
                else:
                    doc_id = result.structured_content["document_id"]
                    await client.call_tool("coffer__delete_document", {"kb": "notes", "doc_id": doc_id})
            found = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "tides"})
            assert not found.is_error
            assert found.structured_content["passages"]
    assert store.changed() == []
