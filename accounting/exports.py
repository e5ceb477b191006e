"""CSV and XLSX, streamed: rows go out as they come from the database, so a million rows
use the memory of one chunk (docs/accounting.md).

An XLSX file is a ZIP of a few XML parts; the worksheet part is written row by row into a
ZIP that is itself streamed (zipstream-ng), with strings inline (no shared-string table to
hold in memory). Numbers are written as numbers, dates and times as the spreadsheet's own
(UTC, shown as 2026-12-01 and 2026-12-01 14:30:00), charges with two decimals and thousands
separators, and a last row totals the columns asked (a SUM formula with its value, so that
a reader that does not compute formulas sees it too).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from xml.sax.saxutils import escape

import zipstream

CHUNK_ROWS = 500
# Characters XML 1.0 does not allow (a cell with one would make the file unreadable).
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# A cell starting with one of these is a formula to a spreadsheet: quote it (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_stream(header: Sequence[str], rows: Iterable[Sequence]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for i, row in enumerate(rows, 1):
        writer.writerow([_csv_cell(v) for v in row])
        if i % CHUNK_ROWS == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


# Cell styles (the `cellXfs` of _STYLES, in order).
GENERAL, DATE, DATETIME, MONEY, QUANTITY, BOLD, BOLD_MONEY = range(7)
_EPOCH = datetime(1899, 12, 30)  # a spreadsheet's day 0 (with Lotus's leap day 1900)


def xlsx_stream(
    sheet: str,
    header: Sequence[str],
    rows: Iterable[Sequence],
    *,
    money: Sequence[str] = (),
    quantities: Sequence[str] = (),
    totals: Sequence[str] = (),
) -> Iterator[bytes]:
    """`money` and `quantities` name the columns shown as amounts (two decimals) and as
    quantities (three); `totals` the columns that a last row, "Total", sums."""
    zs = zipstream.ZipStream(compress_type=zipstream.ZIP_DEFLATED, compress_level=6)
    zs.add(_CONTENT_TYPES, "[Content_Types].xml")
    zs.add(_ROOT_RELS, "_rels/.rels")
    zs.add(_WORKBOOK.format(name=escape(sheet[:31], {'"': "&quot;"})), "xl/workbook.xml")
    zs.add(_WORKBOOK_RELS, "xl/_rels/workbook.xml.rels")
    zs.add(_STYLES, "xl/styles.xml")
    styles = [
        MONEY if name in money else QUANTITY if name in quantities else GENERAL for name in header
    ]
    summed = [i for i, name in enumerate(header) if name in totals]
    zs.add(_sheet(header, rows, styles, summed), "xl/worksheets/sheet1.xml")
    yield from zs


def _sheet(
    header: Sequence[str], rows: Iterable[Sequence], styles: Sequence[int], summed: Sequence[int]
) -> Iterator[bytes]:
    yield (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
        b"<sheetData>"
    )
    letters = [_column(i) for i in range(len(header))]
    chunk: list[str] = [_row(1, letters, header, [BOLD] * len(header))]
    sums = dict.fromkeys(summed, Decimal(0))
    number = 1
    for number, row in enumerate(rows, 2):
        chunk.append(_row(number, letters, row, styles))
        for i in summed:
            value = row[i] if i < len(row) else None
            if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
                sums[i] += Decimal(value)
        if len(chunk) >= CHUNK_ROWS:
            yield "".join(chunk).encode()
            chunk.clear()
    if summed:
        chunk.append(_totals(number + 1, letters, sums, styles))
    chunk.append("</sheetData></worksheet>")
    yield "".join(chunk).encode()


def _totals(number: int, letters: Sequence[str], sums: dict[int, Decimal], styles) -> str:
    cells = [f'<c r="A{number}" t="inlineStr" s="{BOLD}"><is><t>Total</t></is></c>']
    for i, total in sums.items():
        if i == 0:
            continue  # the label's column
        letter, style = letters[i], BOLD_MONEY if styles[i] == MONEY else BOLD
        formula = f"SUM({letter}2:{letter}{number - 1})"
        cells.append(f'<c r="{letter}{number}" s="{style}"><f>{formula}</f><v>{total}</v></c>')
    return f'<row r="{number}">{"".join(cells)}</row>'


def _row(number: int, letters: Sequence[str], values: Sequence, styles: Sequence[int]) -> str:
    cells = []
    for letter, value, style in zip(letters, values, styles, strict=False):
        ref = f"{letter}{number}"
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            cells.append(f'<c r="{ref}" t="b"><v>{int(value)}</v></c>')
        elif isinstance(value, int | float | Decimal):
            cells.append(f'<c r="{ref}" s="{style}"><v>{value}</v></c>')
        elif isinstance(value, datetime):
            cells.append(f'<c r="{ref}" s="{DATETIME}"><v>{_serial(value)}</v></c>')
        elif isinstance(value, date):
            cells.append(f'<c r="{ref}" s="{DATE}"><v>{(value - _EPOCH.date()).days}</v></c>')
        else:
            text = _ILLEGAL_XML.sub("", _text(value))
            cells.append(
                f'<c r="{ref}" t="inlineStr" s="{style}"><is><t xml:space="preserve">'
                f"{escape(text)}</t></is></c>"
            )
    return f'<row r="{number}">{"".join(cells)}</row>'


def _serial(moment: datetime) -> str:
    """A date and time as a spreadsheet's number of days since its epoch, in UTC."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    delta = moment - _EPOCH
    return f"{delta.days + delta.seconds / 86400 + delta.microseconds / 86_400_000_000:.10f}"


def _text(value) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _csv_cell(value):
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _column(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


_CONTENT_TYPES = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>
<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>
<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>
<Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>
</Types>"""
_ROOT_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/>
</Relationships>"""
_WORKBOOK = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">
<sheets><sheet name="{name}" sheetId="1" r:id="rId1"/></sheets>
</workbook>"""
_WORKBOOK_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/>
<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>
</Relationships>"""
_STYLES = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">
<numFmts count="3"><numFmt numFmtId="164" formatCode="yyyy-mm-dd"/><numFmt numFmtId="165" formatCode="yyyy-mm-dd hh:mm:ss"/><numFmt numFmtId="166" formatCode="#,##0.000"/></numFmts>
<fonts count="2"><font><sz val="11"/><name val="Calibri"/></font><font><b/><sz val="11"/><name val="Calibri"/></font></fonts>
<fills count="2"><fill><patternFill patternType="none"/></fill><fill><patternFill patternType="gray125"/></fill></fills>
<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>
<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>
<cellXfs count="7">
<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>
<xf numFmtId="164" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="165" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="4" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="166" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>
<xf numFmtId="4" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1" applyNumberFormat="1"/>
</cellXfs>
<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>
</styleSheet>"""
