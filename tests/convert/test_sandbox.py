"""Heavy conversions run in a worker process that is stopped after its time limit."""

from __future__ import annotations

import io
import zipfile

import pytest

from coffer_mcp.convert import convert
from coffer_mcp.errors import IngestRejectedError
from tests.conftest import FIXTURES

DOCX = (FIXTURES / "sample.docx").read_bytes()


def test_a_docx_converts_in_the_worker_like_in_process() -> None:
    assert convert("a.docx", DOCX, timeout=60).markdown == convert("a.docx", DOCX).markdown


def test_a_conversion_over_its_time_limit_is_stopped_and_the_next_one_works() -> None:
    with pytest.raises(IngestRejectedError) as caught:
        convert("slow.docx", DOCX, timeout=0.001)
    assert caught.value.reason == "conversion_failed"
    assert "conversion_timeout" in caught.value.hint
    assert "Bramble" in convert("again.docx", DOCX, timeout=60).markdown


def test_a_malformed_file_is_rejected_by_the_worker_with_a_typed_error() -> None:
    with pytest.raises(IngestRejectedError) as caught:
        convert("broken.docx", b"PK\x03\x04 not really a zip", timeout=60)
    assert caught.value.reason == "conversion_failed"


def test_a_decompression_bomb_runs_out_of_memory_in_the_worker_not_here() -> None:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with zipfile.ZipFile(io.BytesIO(DOCX)) as original:
            for item in original.infolist():
                if item.filename != "word/document.xml":
                    archive.writestr(item, original.read(item))
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(b'<?xml version="1.0"?><w:document xmlns:w="x"><w:body><w:p><w:r><w:t>')
            block = b"A" * (1 << 20)
            for _ in range(600):  # 600 MB of text inside a few MB
                member.write(block)
            member.write(b"</w:t></w:r></w:p></w:body></w:document>")
    data = bomb.getvalue()
    assert len(data) < 10 * 1024 * 1024
    with pytest.raises(IngestRejectedError) as caught:
        convert("bomb.docx", data, timeout=120, memory_bytes=900 * 1024 * 1024)
    assert caught.value.reason == "conversion_failed"
