"""A job's log read in chunks: decoded text that remembers where the next read starts.

Plain functions over bytes (no Django): the backends decode what they read with them, and
the log selector (`scheduling/selectors/logs.py`) reads the output file a backend wrote.
"""

from __future__ import annotations


class LogText(str):
    """A chunk of a job's log, decoded, that remembers how many bytes of the raw log it came
    from: invalid bytes become U+FFFD (three bytes in UTF-8), so the text's own length in
    bytes is not where the next read starts."""

    __slots__ = ("raw_bytes",)
    raw_bytes: int


def raw_length(text: str) -> int:
    """How many bytes of the raw log `text` stands for (a backend that returns plain text
    returns valid UTF-8, whose length is its own)."""
    size = getattr(text, "raw_bytes", None)
    return size if size is not None else len(text.encode())


def decode_log(data: bytes) -> LogText:
    """A chunk of a job's log as text. A character cut at the chunk's end is left for the next
    read (the byte offsets a reader adds up then stay whole characters); invalid bytes inside
    are replaced, after counting: `raw_bytes` is how far into the raw log the chunk reached."""
    cut = 0
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back
            continue
        need = (
            2
            if byte & 0xE0 == 0xC0
            else 3
            if byte & 0xF0 == 0xE0
            else 4
            if byte & 0xF8 == 0xF0
            else 1
        )
        cut = back if need > back else 0
        break
    whole = data[:-cut] if cut else data
    text = LogText(whole.decode("utf-8", errors="replace"))
    text.raw_bytes = len(whole)
    return text
