"""PPTX to Markdown: a heading per slide (its title), bullets as lists, tables with merged cells.

MarkItDown writes each text box as its raw text, so bullets lose their markers and run
together, and a slide without a title shape has no boundary at all. Pictures still go through
MarkItDown's own helper; charts are tables of the values their part caches (``chart_markdown``).
"""

from __future__ import annotations

import io
from typing import Any, ClassVar

from ._base import ExtensionConverter, engine_missing
from ._charts import chart_markdown
from ._csv import markdown_table
from ._places import Mapped, places_of

__all__ = ["SlideConverter"]

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_BODY_PLACEHOLDERS = {2, 7}  # PP_PLACEHOLDER.BODY, OBJECT: their paragraphs are bullets by default


class SlideConverter(ExtensionConverter):
    """One section per slide, in slide order; speaker notes under ``### Notes``."""

    name = "python-pptx/2"  # 2: chart values as a sheet prints them, every chart type
    extensions: ClassVar[frozenset[str]] = frozenset({"pptx"})

    def convert(self, data: bytes, filename: str) -> Mapped:
        try:
            import pptx
            from markitdown.converters import PptxConverter
        except ImportError as exc:
            raise engine_missing("PPTX converter (python-pptx)", "pptx", "'markitdown[pptx]'") from exc
        helper = PptxConverter()  # for pictures
        deck = pptx.Presentation(io.BytesIO(data))
        parts: list[tuple[str, dict[str, int]]] = []
        for number, slide in enumerate(deck.slides, 1):
            parts.extend((part, {"slide": number}) for part in _slide(slide, number, helper) if part.strip())
        mapped = places_of(parts)
        return Mapped(mapped.markdown + "\n", mapped.places)


def _slide(slide: Any, number: int, helper: Any) -> list[str]:
    title_shape = slide.shapes.title
    title = " ".join((title_shape.text or "").split()) if title_shape is not None else ""
    # The first slide's title names the deck (the document's title); every slide is a section.
    marker = "#" if number == 1 and title else "##"
    parts = [f"{marker} {title or f'Slide {number}'}"]
    for shape in _ordered(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        parts.extend(_shape(shape, helper))
    notes = _notes(slide)
    if notes:
        parts.append("### Notes\n\n" + notes)
    return parts


def _ordered(shapes: Any) -> list[Any]:
    return sorted(shapes, key=lambda s: (s.top if s.top is not None else -1, s.left if s.left is not None else -1))


def _shape(shape: Any, helper: Any) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [part for inner in _ordered(shape.shapes) for part in _shape(inner, helper)]
    if helper._is_picture(shape):
        return [helper._convert_picture_to_markdown(shape).strip()]
    if getattr(shape, "has_table", False) and shape.has_table:
        return [_table(shape.table)]
    if getattr(shape, "has_chart", False) and shape.has_chart:
        return [chart_markdown(shape.chart_part.blob)]
    if shape.has_text_frame:
        return [_text_frame(shape)]
    return []


def _table(table: Any) -> str:
    """Rows of cell text; a merged cell's text repeated in every cell it covers (as docling does)."""
    rows = [[" ".join((cell.text or "").split()) for cell in row.cells] for row in table.rows]
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if cell.is_merge_origin:
                for dr in range(cell.span_height):
                    for dc in range(cell.span_width):
                        if r + dr < len(rows) and c + dc < len(rows[r + dr]):
                            rows[r + dr][c + dc] = rows[r][c]
    return markdown_table(rows).rstrip("\n") if rows else ""


def _text_frame(shape: Any) -> str:
    """Paragraphs; bullets and numbered items as Markdown lists, nested by their level."""
    default_bullets = _placeholder_type(shape) in _BODY_PLACEHOLDERS
    blocks: list[str] = []
    numbers: dict[int, int] = {}  # level -> the last number given in the current list
    for paragraph in shape.text_frame.paragraphs:
        text = " ".join(paragraph.text.replace("\v", " ").split())
        if not text:
            continue
        kind = _bullet_kind(paragraph, default_bullets)
        indent = "  " * paragraph.level
        if kind == "number":
            numbers[paragraph.level] = numbers.get(paragraph.level, 0) + 1
            line = f"{indent}{numbers[paragraph.level]}. {text}"
        elif kind == "bullet":
            line = f"{indent}- {text}"
        else:
            numbers.clear()
            blocks.append(text)
            continue
        if blocks and _is_list(blocks[-1]):
            blocks[-1] += "\n" + line  # items of one list stay together
        else:
            blocks.append(line)
    return "\n\n".join(blocks)


def _is_list(block: str) -> bool:
    head = block.lstrip().split(" ", 1)[0]
    return head == "-" or (head.endswith(".") and head[:-1].isdigit())


def _placeholder_type(shape: Any) -> int | None:
    if not shape.is_placeholder:
        return None
    try:
        return int(shape.placeholder_format.type)
    except (ValueError, AttributeError):
        return None


def _bullet_kind(paragraph: Any, default_bullets: bool) -> str:
    properties = paragraph._p.pPr
    if properties is not None:
        if properties.find(f"{_A}buNone") is not None:
            return "plain"
        if properties.find(f"{_A}buAutoNum") is not None:
            return "number"
        if properties.find(f"{_A}buChar") is not None or properties.find(f"{_A}buBlip") is not None:
            return "bullet"
    return "bullet" if default_bullets or paragraph.level > 0 else "plain"


def _notes(slide: Any) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return (frame.text or "").strip() if frame is not None else ""
