"""`switchyard sandbox`: live sandboxes from a terminal (docs/sandboxes.md, docs/cli.md):
`create`, `ls`, `show`, `exec`, `put`, `get`, `rm`.

`exec` passes the command's own output through and exits with its exit code (124 when it
timed out), like `ssh` or `docker exec`; the CLI's own errors keep their exit codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from switchyard_cli.client import BAD_INPUT, OK, CliError
from switchyard_cli.sandbox import Sandbox

TIMED_OUT_EXIT = 124


def _line(data: dict) -> str:
    idle = f"idle {data['idle_s']:.0f}/{data['idle_timeout_s']} s"
    return (
        f"{data['id']}  {data['project']:<12} {data['state']:<8} "
        f"{data['template'] or 'system':<10} age {data['age_s']:.0f} s  {idle}  "
        f"{data['exec_count']} execs  {data['instance_minutes']:.2f} instance-min"
    )


def cmd_create(args, out) -> int:
    box = Sandbox.create(
        args.project,
        template=args.template,
        cpus=args.cpus,
        memory_mb=args.memory_mb,
        idle_timeout_s=args.idle_timeout,
        max_lifetime_s=args.max_lifetime,
        allow=args.allow or (),
        wait_s=0 if args.no_wait else args.wait,
    )
    out.emit(box.data, box.id if args.quiet else _line(box.data))
    return OK


def cmd_ls(args, out) -> int:
    boxes = Sandbox.ls(everything=args.all)
    out.emit([b.data for b in boxes], "\n".join(_line(b.data) for b in boxes) or "no sandbox")
    return OK


def cmd_show(args, out) -> int:
    box = Sandbox.attach(args.id)
    d = box.data
    text = _line(d) + (f"\nended: {d['end_reason']}" if d.get("end_reason") else "")
    out.emit(d, text)
    return OK


def _env(pairs: list[str] | None) -> dict[str, str]:
    env = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep:
            raise CliError(f"--env takes NAME=VALUE, got {pair!r}", BAD_INPUT)
        env[name] = value
    return env


def cmd_exec(args, out) -> int:
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        raise CliError(
            "give the command after --, e.g. switchyard sandbox exec ID -- ls -l", BAD_INPUT
        )
    box = Sandbox.attach(args.id)
    stdin = sys.stdin.buffer.read() if args.stdin else None
    kwargs = {"stdin": stdin, "env": _env(args.env), "cwd": args.cwd, "timeout": args.timeout}
    if args.stream:
        result: dict = {}
        for stream, data in box.exec_stream(args.command, **kwargs):
            if stream == "result":
                result = data
                continue
            target = sys.stdout if stream == "stdout" else sys.stderr
            target.buffer.write(data)
            target.flush()
        code, timed_out = result.get("exit_code"), result.get("timed_out")
    else:
        done = box.exec(args.command, **kwargs)
        sys.stdout.buffer.write(done.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(done.stderr)
        sys.stderr.flush()
        code, timed_out = done.exit_code, done.timed_out
    if timed_out or code is None:
        return TIMED_OUT_EXIT
    return int(code)


def cmd_put(args, out) -> int:
    box = Sandbox.attach(args.id)
    data = sys.stdin.buffer.read() if args.local == "-" else Path(args.local).read_bytes()
    box.write(args.path, data)
    out.emit({"path": args.path, "bytes": len(data)}, f"{args.path}: {len(data)} bytes")
    return OK


def cmd_get(args, out) -> int:
    data = Sandbox.attach(args.id).read(args.path)
    if args.local in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        Path(args.local).write_bytes(data)
    return OK


def cmd_rm(args, out) -> int:
    box = Sandbox.attach(args.id)
    box.delete()
    out.emit(box.data, f"{box.id} {box.state}")
    return OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("sandbox", help="live sandboxes: create, ls, show, exec, put, get, rm")
    verbs = top.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("create", help="start a sandbox (waits until it is ready)")
    p.add_argument("--project", required=True)
    p.add_argument("--template", default="", help='an image reference; "" the host system')
    p.add_argument("--cpus", type=int)
    p.add_argument("--memory-mb", type=int)
    p.add_argument("--idle-timeout", type=int, help="seconds without an exec before it ends")
    p.add_argument("--max-lifetime", type=int, help="seconds it may live in all")
    p.add_argument("--allow", action="append", metavar="HOST:PORT", help="egress (repeat)")
    p.add_argument("--wait", type=float, default=60, help="seconds to wait for it to start")
    p.add_argument("--no-wait", action="store_true", help="answer at once (starting, queued)")
    p.add_argument("-q", "--quiet", action="store_true", help="print the id alone")
    p.set_defaults(run=cmd_create)
    p = verbs.add_parser("ls", help="your projects' live sandboxes")
    p.add_argument("--all", action="store_true", help="the ended ones too")
    p.set_defaults(run=cmd_ls)
    p = verbs.add_parser("show", help="one sandbox")
    p.add_argument("id")
    p.set_defaults(run=cmd_show)
    p = verbs.add_parser("exec", help="run a command: switchyard sandbox exec ID -- argv…")
    p.add_argument("id")
    p.add_argument("--stdin", action="store_true", help="send this terminal's stdin")
    p.add_argument("--env", action="append", metavar="NAME=VALUE")
    p.add_argument("--cwd")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--stream", action="store_true", help="show the output as it comes")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(run=cmd_exec)
    p = verbs.add_parser("put", help="write a local file (- for stdin) into the sandbox")
    p.add_argument("id")
    p.add_argument("local")
    p.add_argument("path", help="inside the sandbox (relative: in /home/sandbox)")
    p.set_defaults(run=cmd_put)
    p = verbs.add_parser("get", help="read a file of the sandbox (to stdout, or LOCAL)")
    p.add_argument("id")
    p.add_argument("path")
    p.add_argument("local", nargs="?")
    p.set_defaults(run=cmd_get)
    p = verbs.add_parser("rm", help="end a sandbox now")
    p.add_argument("id")
    p.set_defaults(run=cmd_rm)
