"""A job's device files in its sandbox, on both backends (docs/security.md).

The local backend knows where its job runs when it starts it: the supervisor checks each
device file before the sandbox starts (shim.py) and binds exactly those. A Slurm job learns
its node and GPUs only when its script runs there: the script finds them in what Slurm gave
it (`SLURMD_NODENAME`, `SLURM_JOB_GPUS`), checks them and binds them the same way. Either
way a device file that is missing fails the job with its path in the reason: a GPU job never
runs without its GPUs' devices.
"""

from __future__ import annotations

import os
import shlex
import stat

from scheduling.decisions.devices import INDEX, NODE, DeviceFiles, DeviceTable, parts

MISSING = (
    "the device file {path} ({what}) is missing or not a character device: a GPU job never "
    "runs without the devices of its GPUs (the node's device files are set on its pool or "
    "node)"
)

# The Slurm script's array of bubblewrap arguments, expanded where the sandbox's argv has it.
SHELL_DEVICES = '"${switchyard_devices[@]}"'


def bwrap_args(binds: tuple[tuple[str, str, str], ...]) -> list[str]:
    """bubblewrap's arguments that show each device file at its path inside the sandbox."""
    return [arg for host, inside, _ in binds for arg in ("--dev-bind", host, inside)]


def device_minor(path: str) -> int | None:
    """The minor number of the character device at `path`, or None (missing, not one)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.minor(st.st_rdev) if stat.S_ISCHR(st.st_mode) else None


def missing_reason(path: str, what: str) -> str:
    return MISSING.format(path=path, what=what)


def slurm_lines(table: DeviceTable, gpus: int) -> list[str]:
    """Script lines that fill `switchyard_devices` with the device files of the GPUs Slurm
    gave the job on this node, each under its own name, and the control devices; and that
    count CUDA_VISIBLE_DEVICES from 0 (decisions/devices.py says why). Nothing for a job without GPUs or a site without device
    files. They run before the descriptor's environment is exported: what the job sets cannot
    change which GPUs it gets."""
    if not gpus or not table.any:
        return []
    gpu_cases, control_cases = [], []
    for name, files in [*table.nodes, ("*", table.default)]:
        label = "*" if name == "*" else shlex.quote(name)
        gpu_cases.append(f"    {label}) {_gpu_word(files)} ;;")
        control = " ".join(_word(path, None) for path in files.control) if files else ""
        control_cases.append(f"  {label}) switchyard_control=({control}) ;;")
    missing = missing_reason("$switchyard_host", "$switchyard_what")
    return [
        "switchyard_node=${SLURMD_NODENAME-}",
        "switchyard_devices=() switchyard_visible= switchyard_n=0",
        # A GPU's device file on this node: $1 its index ("" where the node has none).
        "switchyard_gpu_file() {",
        '  case "$switchyard_node" in',
        *gpu_cases,
        "  esac",
        "}",
        'case "$switchyard_node" in',
        *control_cases,
        "esac",
        "switchyard_check() {",
        '  [ -c "$switchyard_host" ] && return',
        f'  echo "switchyard: {missing}" >&2',
        "  exit 1",
        "}",
        "for switchyard_g in ${SLURM_JOB_GPUS//,/ }; do",
        '  switchyard_host=$(switchyard_gpu_file "$switchyard_g")',
        '  [ -n "$switchyard_host" ] || break',
        '  switchyard_what="GPU $switchyard_g of node $switchyard_node"',
        "  switchyard_check",
        '  switchyard_devices+=(--dev-bind "$switchyard_host" "/dev/${switchyard_host##*/}")',
        "  switchyard_visible+=${switchyard_visible:+,}$switchyard_n",
        "  switchyard_n=$((switchyard_n + 1))",
        "done",
        'if [ "$switchyard_n" -gt 0 ]; then',
        '  for switchyard_host in "${switchyard_control[@]}"; do',
        '    switchyard_what="control device of node $switchyard_node"',
        "    switchyard_check",
        '    switchyard_devices+=(--dev-bind "$switchyard_host" "/dev/${switchyard_host##*/}")',
        "  done",
        '  export CUDA_VISIBLE_DEVICES="$switchyard_visible"',
        "fi",
    ]


def _gpu_word(files: DeviceFiles | None) -> str:
    return f"printf '%s' {_word(files.gpu, '$1')}" if files else ":"


def _word(pattern: str, index: str | None) -> str:
    """The pattern as one shell word: its text quoted, {node} this node's name, {index}
    `index` (a shell parameter)."""
    words = []
    for part in parts(pattern):
        if part == NODE:
            words.append('"$switchyard_node"')
        elif part == INDEX and index is not None:
            words.append(f'"{index}"')
        elif part:
            words.append(shlex.quote(part))
    return "".join(words) or "''"
