"""A local job's ranks: one process per node it was given, and the environment they read.

Every virtual node of the local backend is this machine, so a multi-node job runs as one
sandbox with one process per allocated node in it (its ranks): they share the sandbox's
network namespace, where rank 0 listens on `MASTER_ADDR` = 127.0.0.1 (the namespace's own
loopback, never the host's) and the others reach it, as across the nodes of a cluster. The
control plane stays out of reach as for any job (jobnet.py): nothing here changes the
network.

The ranks are started inside the sandbox by `RANK_RUNNER`, a bash program (bash is in every
sandbox; the project's Python is not): each rank in a process group of its own with its rank's
variables, its output prefixed `[rank N] ` into the job's one log. The job ends when every rank
has ended. The first rank that fails stops the others (SIGTERM to their groups, and to a
rank still starting, not yet in one; SIGKILL after the grace period) and the runner exits
with that rank's code, its last line saying which rank it was (the supervisor makes that
line the job's reason, jobwait.py). A cancel or the
walltime reach every process of the sandbox, ranks included, as for a one-node job.

Every job gets the rank environment, a one-node job as rank 0 of 1: `SWITCHYARD_NODE_RANK`,
`SWITCHYARD_NUM_NODES`, and what `torch.distributed`'s `env://` reads (`MASTER_ADDR`,
`MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`) and
what `torchrun` reads for its own options (`PET_NNODES`, `PET_NODE_RANK`,
`PET_MASTER_ADDR`, `PET_MASTER_PORT`): a plain `torchrun --nproc-per-node=K train.py` then
runs K workers on each node, rendezvousing at rank 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.decisions.types import Placement
from scheduling.spec import TaskSpec

MASTER_ADDR = "127.0.0.1"  # the sandbox's own loopback: every rank is in the one sandbox
MASTER_PORT = "29500"  # torchrun's default; the descriptor's env may choose another
# What the backend sets from the allocation; a descriptor's env cannot override them.
RANK_ENV = (
    "SWITCHYARD_NODE_RANK",
    "SWITCHYARD_NUM_NODES",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
)
# $0 is a name; $1 the grace period in seconds; then one CUDA_VISIBLE_DEVICES value per rank,
# "--", and the command. Each rank runs in a session (and process group) of its own
# (`setsid`, which execs in place: `$!` is the rank's own pid and group), with SIGINT and
# SIGQUIT back to their defaults (bash ignores them in what it runs in the background).
RANK_RUNNER = r"""grace=$1
shift
gpus=()
while [ "$1" != -- ]; do gpus+=("$1"); shift; done
shift
n=${#gpus[@]} ranks=() left=() seds=() failed= code=0 stopping= killer=
# Each rank's group; a rank not yet reaped whose group is not there yet (its `setsid` has not
# run) by its pid, once: a stop sent to the group alone would miss it, and it would run on.
stop() {
  local p
  for p in "${ranks[@]}"; do
    kill -"$1" -- "-$p" 2>/dev/null && continue
    case " ${left[*]} " in *" $p "*) kill -"$1" "$p" 2>/dev/null ;; esac
  done
}
trap 'stopping=1 code=143; stop TERM' TERM INT HUP  # 143: as if SIGTERM had ended it
trap 'stop KILL' USR1  # the grace is over: with the ranks left now
dir=$(mktemp -d) || exit 1
for ((r = 0; r < n; r++)); do
  mkfifo "$dir/$r" || exit 1
  sed -u "s/^/[rank $r] /" <"$dir/$r" &
  seds+=($!)
  (
    trap - INT QUIT
    export SWITCHYARD_NODE_RANK=$r RANK=$r NODE_RANK=$r PET_NODE_RANK=$r
    export CUDA_VISIBLE_DEVICES="${gpus[r]}"
    exec setsid "$@" >"$dir/$r" 2>&1 </dev/null
  ) &
  ranks+=($!)
done
left=("${ranks[@]}")
while [ ${#left[@]} -gt 0 ]; do
  ended=
  wait -n -p ended "${left[@]}" 2>/dev/null  # not "Killed": the reason says it
  rc=$?
  if [ -z "$ended" ]; then
    [ "$rc" -gt 128 ] && continue  # a signal the trap took
    left=()
    break  # none of them is left to wait for
  fi
  rest=()
  for p in "${left[@]}"; do [ "$p" = "$ended" ] || rest+=("$p"); done
  left=("${rest[@]}")
  if [ "$rc" -ne 0 ] && [ -z "$failed" ] && [ -z "$stopping" ]; then
    for ((r = 0; r < n; r++)); do [ "${ranks[r]}" = "$ended" ] && failed=$r; done
    code=$rc
    stop TERM
    (sleep "$grace"; kill -USR1 $$) &
    killer=$!
  fi
done
[ -n "$killer" ] && kill "$killer" 2>/dev/null
stop KILL  # what a rank left behind: a job that ended leaves no process
(sleep 2; kill "${seds[@]}" 2>/dev/null) &
guard=$!
wait "${seds[@]}"
kill "$guard" 2>/dev/null
rm -rf "$dir"
if [ -n "$failed" ]; then
  echo "switchyard: rank $failed of $n failed (exit code $code): the other ranks were stopped" >&2
fi
exit "$code"
"""


def rank_count(spec: TaskSpec, placement: Placement) -> int:
    """How many processes the job runs: one per node when it asked for several nodes
    (`resources.nodes`), else one (a job whose cores were spread runs once, as on Slurm)."""
    nodes = spec.resources.nodes or 1
    return len(placement.allocations) if nodes > 1 else 1


def rank_env(spec: TaskSpec, placement: Placement, user_env: dict[str, str]) -> dict[str, str]:
    """The variables every rank shares (its own rank is set by the runner; a one-node job's
    is 0 here). `MASTER_PORT` is the descriptor's if it set one."""
    size = str(rank_count(spec, placement))
    port = user_env.get("MASTER_PORT") or MASTER_PORT
    return {
        "SWITCHYARD_NODE_RANK": "0",
        "SWITCHYARD_NUM_NODES": size,
        "RANK": "0",
        "NODE_RANK": "0",
        "WORLD_SIZE": size,
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": port,
        "PET_NNODES": size,
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": MASTER_ADDR,
        "PET_MASTER_PORT": port,
    }


def rank_argv(
    argv: Sequence[str],
    spec: TaskSpec,
    placement: Placement,
    visible: Sequence[str],
    *,
    grace_s: float,
) -> list[str]:
    """`argv` as the sandbox runs it: itself for one rank, under the runner for several.
    `visible` is each rank's CUDA_VISIBLE_DEVICES, in the order of the allocations: its own
    node's GPUs among all the device files of the job's one sandbox (launch.py)."""
    if rank_count(spec, placement) == 1:
        return list(argv)
    gpus = list(visible)
    return ["/bin/bash", "-c", RANK_RUNNER, "switchyard-ranks", f"{grace_s:g}", *gpus, "--", *argv]
