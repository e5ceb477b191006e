"""Numbers in the units a researcher writes them in, for decision reasons."""

from __future__ import annotations

_GIB = 1024
_TIB = 1024 * 1024


def format_duration(seconds: int) -> str:
    """`7200` → `2h`, `5400` → `1h30min`, `259200` → `72h`, `45` → `45s`.

    Hours, not days: walltimes are written in hours in descriptors and in Slurm.
    """
    if seconds < 60:
        return f"{seconds}s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}min")
    if secs:
        parts.append(f"{secs}s")
    return "".join(parts)


def format_memory(mib: int) -> str:
    """`1048576` → `1 TiB`, `262144` → `256 GiB`, `1536` → `1.5 GiB`, `512` → `512 MiB`."""
    if mib >= _TIB and mib % _TIB == 0:
        return f"{mib // _TIB} TiB"
    if mib >= _GIB and mib % _GIB == 0:
        return f"{mib // _GIB} GiB"
    if mib >= _GIB:
        return f"{mib / _GIB:.1f} GiB"
    return f"{mib} MiB"


def count(n: int, word: str) -> str:
    """`count(1, "CPU")` → `1 CPU`, `count(8, "GPU")` → `8 GPUs`, `count(0, "GPU")` → `no GPUs`."""
    if n == 0:
        return f"no {word}s"
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
