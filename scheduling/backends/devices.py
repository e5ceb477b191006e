"""A job's device files in its sandbox, on both backends (docs/security.md).

The local backend knows where its job runs when it starts it: the supervisor checks each
device file before the sandbox starts (shim.py) and binds exactly those. A Slurm job learns
its node and GPUs only when its script runs there: the script finds them in what Slurm gave
it (`SLURMD_NODENAME`, `SLURM_JOB_GPUS`: places in the node's gres.conf, whose File= lines
name the device files), checks them and binds them the same way. Either
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

DEFAULT_GRES_CONF = "/etc/slurm/gres.conf"  # beside slurm.conf, where Slurm reads it
NO_GRES_FILE = (
    "GPU {index} of node {node} has no File= in {gres} (index {index} of this node's "
    "gpu File= list): its device file is unknown, so the job does not run (docs/slurm.md)"
)
# This node's GPU files in gres.conf, one a line, in the order Slurm numbers them
# (`SLURM_JOB_GPUS`): each `Name=gpu` line whose NodeName= (a hostlist) names the node, or
# that names none, with its File= expanded (`/dev/nvidia[4-7]`, `a[1,3-4]`). One bracket
# group per name, as gres.conf writes GPUs.
GRES_FILES_AWK = r"""
function expand(s,   lb, rb, pre, body, post, n, parts, i, r, a, b, k, out) {
  lb = index(s, "[")
  rb = index(s, "]")
  if (!lb || rb < lb) return " " s
  pre = substr(s, 1, lb - 1); body = substr(s, lb + 1, rb - lb - 1)
  post = substr(s, rb + 1)
  n = split(body, parts, ",")
  out = ""
  for (i = 1; i <= n; i++) {
    if (split(parts[i], r, "-") == 2) { a = r[1]; b = r[2] } else { a = parts[i]; b = parts[i] }
    for (k = a + 0; k <= b + 0; k++) out = out " " pre sprintf("%0" length(a) "d", k) post
  }
  return out
}
function items(s,   out, depth, i, c, cur) {
  out = ""; cur = ""; depth = 0
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (c == "[") depth++
    if (c == "]") depth--
    if (c == "," && depth == 0) { out = out expand(cur); cur = "" } else cur = cur c
  }
  return out expand(cur)
}
{
  sub(/#.*/, "")
  name = ""; nodes = ""; file = ""
  for (i = 1; i <= NF; i++) {
    eq = index($i, "=")
    if (!eq) continue
    key = tolower(substr($i, 1, eq - 1)); value = substr($i, eq + 1)
    if (key == "name") name = value
    else if (key == "nodename") nodes = value
    else if (key == "file") file = value
  }
  if (name != "gpu" || file == "") next
  if (nodes != "") {
    hit = 0
    n = split(items(nodes), hosts, " ")
    for (j = 1; j <= n; j++) if (hosts[j] == node) hit = 1
    if (!hit) next
  }
  n = split(items(file), files, " ")
  for (j = 1; j <= n; j++) print files[j]
}
"""

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


def slurm_lines(table: DeviceTable, gpus: int, gres_conf: str = DEFAULT_GRES_CONF) -> list[str]:
    """Script lines that fill `switchyard_devices` with the device files of the GPUs Slurm
    gave the job on this node, each under its own name, and the control devices; and that
    count CUDA_VISIBLE_DEVICES from 0 (decisions/devices.py says why). `SLURM_JOB_GPUS` gives
    each GPU's place among the node's GPUs in `gres_conf`, not its minor number, so a GPU's
    file is the node's File= of that place there; a GPU without one fails the job. Nothing
    for a job without GPUs or a site without device files. They run before the descriptor's environment is exported: what the job sets cannot
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
    gres = shlex.quote(gres_conf)
    no_file = NO_GRES_FILE.format(index="$switchyard_g", node="$switchyard_node", gres=gres_conf)
    return [
        "switchyard_node=${SLURMD_NODENAME-}",
        "switchyard_devices=() switchyard_visible= switchyard_n=0 switchyard_gres=()",
        f'[ -r {gres} ] && mapfile -t switchyard_gres < <(awk -v node="$switchyard_node" '
        f"{shlex.quote(GRES_FILES_AWK)} {gres})",
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
        '  [ -n "$(switchyard_gpu_file "$switchyard_g")" ] || break',
        # SLURM_JOB_GPUS counts the node's GPUs in gres.conf order, not by minor number: the
        # index-th File= of this node is its device file.
        '  case "$switchyard_g" in "" | *[!0-9]*) switchyard_host= ;;',
        "  *) switchyard_host=${switchyard_gres[10#$switchyard_g]-} ;; esac",
        '  if [ -z "$switchyard_host" ]; then',
        f'    echo {shlex.quote("switchyard: ")}"{no_file}" >&2',
        "    exit 1",
        "  fi",
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
