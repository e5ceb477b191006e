"""The descriptor's constants: header values, size and count limits, the patterns and rule
texts shared by the checks and the JSON Schema, the environment denylist, and the allowed
field sets. Nothing here imports from the rest of the package."""

from __future__ import annotations

import re

API_VERSION = "switchyard/v1"
KIND = "Task"
WORKFLOW_KIND = "Workflow"
_ENDPOINTS = {
    KIND: ("single tasks", "/api/v1/tasks/"),
    WORKFLOW_KIND: ("workflows", "/api/v1/workflows/"),
}

# A workflow's size is capped before any of its tasks is validated, so a huge one is refused
# in the time it takes to count it. Not settings: the DAG code and the schema rely on them.
MAX_WORKFLOW_TASKS = 1000
MAX_WORKFLOW_EDGES = 20_000  # depends_on entries (names and ids) over all tasks

# --- limits ---------------------------------------------------------------------------------
# The absurd-value caps are not site policy (queues and nodes decide what fits); they stop
# typos like `cpus: 1000000` and keep every number far from overflow in the backends.
_MAX_DEPTH = 32  # a descriptor nests 3 levels; deep nesting is only ever an attack
_MAX_NAME = 63  # Slurm job names, DNS labels and the SlugFields all fit 63
_MAX_CPUS = 100_000
_MAX_GPUS = 10_000
_MAX_NODES = 10_000
_MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB per node
_MAX_DURATION_S = 365 * 86400
_MAX_RETRIES = 10
_MAX_ARG_CHARS = 4096
_MAX_COMMAND_ARGS = 4096
_MAX_SCRIPT_BYTES = 64 * 1024
_MAX_ENV = 128
_MAX_ENV_NAME = 255
_MAX_ENV_VALUE = 4096
_MAX_DEPENDS = 1000
_MAX_TASK_ID = 2**53 - 1  # exact in every JSON client, and within a PostgreSQL bigint
_MAX_HINTS = 10  # "did you mean" suggestions per workflow for unknown dependencies
_MAX_PATH = 4096
_MAX_INPUTS = 64
_MAX_IMAGE = 512
_GOT_CHARS = 80

# --- patterns -------------------------------------------------------------------------------
# Shared by the checks (always with fullmatch, so `$` cannot match before a trailing newline)
# and the JSON Schema (ECMA-262 regexes), so both accept exactly the same text.
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
SLUG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
IMAGE_PATTERN = r"^[A-Za-z0-9/][A-Za-z0-9._:/@+-]*$"
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"
DURATION_PATTERN = r"^([0-9]+|(?=[0-9])([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?)$"
SIZE_PATTERN = r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$"
_NO_NUL_CR = r"^[^\r\u0000]*$"
_NO_NUL_CR_LF = r"^[^\n\r\u0000]*$"

_NAME_RE = re.compile(NAME_PATTERN)
_SLUG_RE = re.compile(SLUG_PATTERN)
_GPU_TYPE_RE = re.compile(GPU_TYPE_PATTERN)
_IMAGE_RE = re.compile(IMAGE_PATTERN)
_ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)
_DURATION_RE = re.compile(
    r"(?P<plain>[0-9]+)|(?:(?P<d>[0-9]+)d)?(?:(?P<h>[0-9]+)h)?(?:(?P<m>[0-9]+)m)?(?:(?P<s>[0-9]+)s)?"
)
_SIZE_RE = re.compile(r"(?P<n>[0-9]+)(?P<unit>Ki|Mi|Gi|Ti|K|M|G|T)?")

_NAME_RULE = (
    "must be 1-63 characters of lower-case letters, digits and hyphens, "
    "starting and ending with a letter or digit"
)
_SLUG_RULE = (
    "must be 1-63 characters of letters, digits, hyphens and underscores, "
    "starting with a letter or digit"
)
SLUG_RULE = _SLUG_RULE


def slug_problem(value: object) -> str | None:
    """The one check of a project's slug and a queue's name, wherever one is stored or
    looked up (descriptors, the Project and Queue models, so the admin console, and the API's
    filters): None when `value` keeps the rule, else the rule."""
    if isinstance(value, str) and len(value) <= _MAX_NAME and _SLUG_RE.fullmatch(value):
        return None
    return _SLUG_RULE


_DURATION_RULE = (
    "must be a duration such as 90s, 30m, 48h, 1h30m or 1d12h "
    "(units d, h, m, s, largest first; a plain number is seconds)"
)
_SIZE_RULE = (
    "must be a size such as 512Gi, 64G or 1024Mi (Ki, Mi, Gi, Ti are powers of 1024; "
    "K, M, G, T are powers of 1000; a plain number is MiB)"
)
_SIZE_UNITS = {
    None: 2**20,  # a plain number is MiB
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}

# --- environment denylist -------------------------------------------------------------------
# The job runs with `--export=NONE` plus the descriptor's env (docs/slurm.md), so these names
# are the ones that would let a descriptor change *how* the job is started or what it is
# allowed to touch, rather than just configure the user's own program. The user-facing list
# is in docs/descriptor.md, "Refused environment names".
_ENV_RESERVED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", "the dynamic loader reads LD_* to load extra code into every program"),
    ("DYLD_", "the dynamic loader reads DYLD_* to load extra code into every program"),
    ("SLURM_", "Slurm sets SLURM_* to describe the allocation; a user value would lie to the job"),
    ("SBATCH_", "Slurm reads SBATCH_* as options; they would override the portal's choices"),
    ("SALLOC_", "Slurm reads SALLOC_* as options; they would override the portal's choices"),
    ("SRUN_", "Slurm reads SRUN_* as options; they would override the portal's choices"),
    ("SWITCHYARD_", "SWITCHYARD_* is reserved for the portal"),
    ("APPTAINER", "the container runtime reads these for binds and image options"),
    ("SINGULARITY", "the container runtime reads these for binds and image options"),
)
_ENV_RESERVED_PREFIX_TUPLE = tuple(prefix for prefix, _ in _ENV_RESERVED_PREFIXES)
_ENV_RESERVED_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ("PATH", "HOME", "USER", "LOGNAME", "SHELL"),
        "the site sets the job's identity and search path for its account",
    ),
    **dict.fromkeys(
        (
            "BASH_ENV",
            "ENV",
            "IFS",
            "CDPATH",
            "GLOBIGNORE",
            "PS4",
            "PROMPT_COMMAND",
            "SHELLOPTS",
            "BASHOPTS",
        ),
        "it changes how the job's shell starts or parses the generated script",
    ),
    **dict.fromkeys(
        (
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "PERL5LIB",
            "PERL5OPT",
            "RUBYOPT",
            "NODE_OPTIONS",
            "GCONV_PATH",
        ),
        "it makes the site's own wrapper and helper programs load foreign code",
    ),
    **dict.fromkeys(
        (
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
        ),
        "the scheduler assigns GPUs; this would reach GPUs not allocated to the task",
    ),
}


def env_reserved(name: str) -> str | None:
    """Why `name` may not be set by a descriptor (nor by an image's Env, docs/containers.md),
    or None when it may."""
    reason = _ENV_RESERVED_NAMES.get(name)
    if reason is not None or not name.startswith(_ENV_RESERVED_PREFIX_TUPLE):
        return reason
    for prefix, reason in _ENV_RESERVED_PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


_TOP_FIELDS = (
    "apiVersion",
    "kind",
    "name",
    "project",
    "type",
    "queue",
    "resources",
    "walltime",
    "estimate",
    "command",
    "script",
    "image",
    "env",
    "secret_env",
    "depends_on",
    "retry_count",
    "fail_action",
    "wait_timeout",
    "trigger",
    "workdir",
    "inputs",
    "priority",
    "notify",
    "sandboxes",
)
# What pages, the API and a stored descriptor show in place of a secret_env value.
SECRET_MASK = "••••"
_RESOURCE_FIELDS = ("nodes", "cpus", "memory", "gpus", "gpu_type")
_TRIGGER_FIELDS = ("file",)
_HEADER_FIELDS = ("apiVersion", "kind")
# A task inside a workflow: the header is set once on the workflow; project is optional.
_WORKFLOW_TASK_FIELDS = tuple(f for f in _TOP_FIELDS if f not in _HEADER_FIELDS)
_WORKFLOW_FIELDS = ("apiVersion", "kind", "name", "project", "tasks")
_ALLOWED_SETS = {
    f: frozenset(f)
    for f in (
        _TOP_FIELDS,
        _RESOURCE_FIELDS,
        _TRIGGER_FIELDS,
        _WORKFLOW_TASK_FIELDS,
        _WORKFLOW_FIELDS,
    )
}
