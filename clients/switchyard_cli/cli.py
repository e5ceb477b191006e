"""`switchyard`: the portal from a terminal, over its REST API (docs/cli.md).

For researchers with sbatch habits: `switchyard submit job.yaml`, `switchyard wait 42`,
`switchyard logs -f 42`, `switchyard files put train.py projects/materials/` (clients/
switchyard_cli/files.py). Only the standard library and PyYAML: it runs on a laptop that has
the package installed, with no Django settings. The token from `login` is kept in the user's
config file (`$SWITCHYARD_CONFIG`, else `$XDG_CONFIG_HOME/switchyard/config.json`), mode 0600
in a folder made 0700; a folder or file another account owns or may write is refused.

Exit codes, for scripts: 0 done (for `wait`: the task succeeded); 1 the task ended without
success; 2 bad input (the portal's 400, with field, expected and got); 3 not logged in or not
allowed; 4 not found; 5 conflict (e.g. the task already ended); 6 the portal is unreachable
or failed; 7 `wait` timed out.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from pathlib import Path

import yaml

from switchyard_cli import files, sandbox_cli
from switchyard_cli.client import (
    AUTH,
    BAD_INPUT,
    OK,
    TASK_FAILED,
    TERMINAL,
    TIMED_OUT,
    Client,
    CliError,
    Output,
    client,
    load_config,
    save_config,
)
from switchyard_cli.preview import preview_text

# -- commands ---------------------------------------------------------------------------


def cmd_login(args, out) -> int:
    config = load_config()
    url = args.url or os.environ.get("SWITCHYARD_URL") or config.get("url")
    if not url:
        raise CliError("say which portal: --url http://portal.example:8000", BAD_INPUT)
    username = args.username or config.get("username") or input("username: ")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {username}: ")
    credentials = {"username": username, "password": password}
    if args.otp:
        credentials["otp"] = args.otp
    try:
        answer = Client(url, None).json("POST", "auth/token/", credentials)
    except CliError as exc:
        # An account with two-factor: ask for the app's code, once (docs/security.md).
        asks_code = any(e.get("field") == "otp" for e in exc.errors)
        if args.otp or not asks_code or not sys.stdin.isatty():
            raise
        credentials["otp"] = input("two-factor code: ").strip()
        answer = Client(url, None).json("POST", "auth/token/", credentials)
    path = save_config(
        {"url": url, "username": username, "token": answer["token"], "expiry": answer["expiry"]}
    )
    out.emit(
        {"url": url, "username": username, "expiry": answer["expiry"], "config": str(path)},
        f"logged in to {url} as {username}; token kept in {path} (expires {answer['expiry']})",
    )
    return OK


def cmd_logout(args, out) -> int:
    config = load_config()
    if config.get("token"):
        try:
            Client(config["url"], config["token"]).call("DELETE", "auth/token/current/")
        except CliError as exc:
            if exc.code != AUTH:  # an expired token is gone anyway
                raise
        config.pop("token", None)
        config.pop("expiry", None)
        save_config(config)
    out.emit({"logged_out": True}, "logged out")
    return OK


def read_document(name: str) -> tuple[bytes, str]:
    """The descriptor's bytes and its media type (JSON or YAML)."""
    if name == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {name}: {exc.strerror}", BAD_INPUT) from None
    is_json = name.endswith(".json") or data.lstrip()[:1] in (b"{", b"[")
    return data, "application/json" if is_json else "application/yaml"


def _is_workflow(data: bytes) -> bool:
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        return False  # the portal says what is wrong with it
    return isinstance(doc, dict) and isinstance(doc.get("tasks"), list)


def cmd_submit(args, out) -> int:
    data, media = read_document(args.file)
    kind = "workflows" if _is_workflow(data) else "tasks"
    if args.dry_run:
        return _dry_run(args, out, data, media, kind)
    api = client(args)
    made = api.call("POST", f"{kind}/", body=data, content_type=media)
    what = "workflow" if kind == "workflows" else "task"
    out.emit(
        made,
        f"submitted {what} {made['id']} ({made.get('name', '')}): {made.get('state')}\n"
        f"  {api.url}/{kind}/{made['id']}/",
    )
    if args.wait and kind == "tasks":
        return _wait(args, out, made["id"])
    return OK


def _dry_run(args, out, data: bytes, media: str, kind: str) -> int:
    """What submitting would do, from the portal's preview; a refusal is printed as the
    submit's would be (on stderr, its exit code), after what the preview could tell."""
    if kind != "tasks":
        raise CliError(
            "--dry-run previews one task; a workflow's tasks are previewed on the Submit page",
            BAD_INPUT,
        )
    try:
        preview = client(args).call("POST", "tasks/preview/", body=data, content_type=media)
    except CliError as exc:
        if isinstance(exc.body, dict) and "accepted" in exc.body:
            out.emit(exc.body, preview_text(exc.body))
        raise
    out.emit(preview, preview_text(preview))
    return OK


def _task_line(task: dict) -> str:
    why = f"  {task['wait_reason']}" if task.get("wait_reason") else ""
    return (
        f"{task['id']:>7}  {task['name'][:24]:<24} {task.get('queue') or '':<16} "
        f"{task['state']:<10}{why}"
    )


def cmd_status(args, out) -> int:
    api = client(args)
    if args.id is not None:
        task = api.json("GET", f"tasks/{args.id}/")
        lines = [_task_line(task)]
        if task.get("reason"):
            lines.append(f"         {task['reason']}")
        out.emit(task, "\n".join(lines))
        return OK
    page = api.json("GET", "tasks/", params={"state": args.state})
    rows = page.get("results", page) if isinstance(page, dict) else page
    text = "\n".join(
        [f"{'ID':>7}  {'NAME':<24} {'QUEUE':<16} STATE"] + [_task_line(t) for t in rows]
    )
    out.emit(rows, text if rows else "no tasks")
    return OK


def cmd_cancel(args, out) -> int:
    task = client(args).json("POST", f"tasks/{args.id}/cancel/")
    note = " (its job is being cancelled)" if task.get("cancelling") else ""
    out.emit(task, f"task {task['id']}: {task['state']}{note}")
    return OK


def _wait(args, out, task_id: int) -> int:
    api = client(args)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    while True:
        task = api.json("GET", f"tasks/{task_id}/")
        if task["state"] in TERMINAL:
            out.emit(task, f"task {task_id}: {task['state']} (exit code {task.get('exit_code')})")
            return OK if task["state"] == "succeeded" else TASK_FAILED
        if deadline is not None and time.monotonic() > deadline:
            out.emit(task, f"task {task_id}: still {task['state']} after {args.timeout} s")
            return TIMED_OUT
        time.sleep(args.interval)


def cmd_wait(args, out) -> int:
    return _wait(args, out, args.id)


def cmd_logs(args, out) -> int:
    """The whole log of the task's current attempt; with -f, until the task ends (a retry's
    new attempt starts its own log, announced)."""
    api = client(args)
    offset, attempt = 0, api.json("GET", f"tasks/{args.id}/")["attempts"]
    while True:
        chunk = api.json("GET", f"tasks/{args.id}/log/", params={"offset": offset})
        text = chunk.get("log") or ""
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            offset = _next_offset(chunk, offset, text)
            continue
        if not args.follow:
            return OK
        task = api.json("GET", f"tasks/{args.id}/")
        if task["attempts"] != attempt:
            attempt, offset = task["attempts"], 0
            print(f"--- attempt {attempt} ---", flush=True)
            continue
        if task["state"] in TERMINAL:
            rest = api.json("GET", f"tasks/{args.id}/log/", params={"offset": offset})
            sys.stdout.write(rest.get("log") or "")  # what came between the two reads
            return OK
        time.sleep(args.interval)


def _next_offset(chunk: dict, offset: int, text: str) -> int:
    """Offsets count bytes of the raw log. The portal says where the next read starts (each
    invalid byte it shows as U+FFFD, three bytes of text for one of log); a portal too old to
    say so sent valid text, whose length in UTF-8 is the same."""
    given = chunk.get("next_offset")
    if isinstance(given, int) and not isinstance(given, bool) and given > offset:
        return given
    return offset + len(text.encode())


def cmd_workflows(args, out) -> int:
    api = client(args)
    if args.id is not None:
        flow = api.json("GET", f"workflows/{args.id}/")
        lines = [f"workflow {flow['id']} {flow['name']}: {flow['state']}"]
        lines += [_task_line(t) for t in flow.get("tasks", [])]
        out.emit(flow, "\n".join(lines))
        return OK
    page = api.json("GET", "workflows/")
    rows = page.get("results", page) if isinstance(page, dict) else page
    text = "\n".join(f"{w['id']:>7}  {w['name'][:32]:<32} {w['state']}" for w in rows)
    out.emit(rows, text or "no workflows")
    return OK


def cmd_usage(args, out) -> int:
    params = {"from": args.start, "to": args.end, "group_by": args.group_by, "period": "all"}
    report = client(args).json("GET", "usage/", params=params)
    out.emit(report, usage_text(report))
    return OK


def usage_text(report: dict) -> str:
    """The totals of a usage report, one metric a line, each in its unit and the charge in the
    site's currency; what running work has used so far beside it, not yet billed."""
    currency = report.get("currency") or ""
    rows = report.get("totals", [])
    if not rows:
        return "no usage in this period"
    lines = [f"{'METRIC':<10} {'USED':>14}  {'UNIT':<18} {'CHARGE':>14}  RUNNING (not billed)"]
    for row in rows:
        charge = f"{row.get('charge', '0')} {currency}".strip()
        lines.append(
            f"{row.get('metric', ''):<10} {row.get('settled', ''):>14}  "
            f"{row.get('unit', ''):<18} {charge:>14}  {row.get('committed', '')}"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="switchyard", description="Submit and follow work on a Switchyard portal."
    )
    top.add_argument("--url", help="the portal (else $SWITCHYARD_URL, else the one logged in to)")
    top.add_argument("-o", "--output", choices=("text", "json"), default="text")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("login", help="get an API token and keep it (0600)")
    p.add_argument("--username", "-u")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.add_argument("--otp", help="an account with two-factor: the app's code (or a recovery code)")
    p.set_defaults(run=cmd_login)
    sub.add_parser("logout", help="revoke the kept token").set_defaults(run=cmd_logout)

    p = sub.add_parser("submit", help="submit a task or workflow descriptor (YAML or JSON)")
    p.add_argument("file", help="the descriptor file, or - for stdin")
    either = p.add_mutually_exclusive_group()
    either.add_argument("--wait", action="store_true", help="then wait for the task to end")
    either.add_argument(
        "--dry-run",
        action="store_true",
        help="submit nothing: show the type, queue, quotas and start it would get",
    )
    _waiting(p)
    p.set_defaults(run=cmd_submit)

    p = sub.add_parser("status", help="one task, or your recent tasks")
    p.add_argument("id", nargs="?", type=int)
    p.add_argument("--state", help="only tasks in this state")
    p.set_defaults(run=cmd_status)

    p = sub.add_parser("logs", help="a task's output")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="until the task ends")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(run=cmd_logs)

    p = sub.add_parser("cancel", help="cancel a task")
    p.add_argument("id", type=int)
    p.set_defaults(run=cmd_cancel)

    p = sub.add_parser("wait", help="wait for a task to end (exit 0 only if it succeeded)")
    p.add_argument("id", type=int)
    _waiting(p)
    p.set_defaults(run=cmd_wait)

    p = sub.add_parser("workflows", help="your workflows, or one with its tasks")
    p.add_argument("id", nargs="?", type=int)
    p.set_defaults(run=cmd_workflows)

    p = sub.add_parser("usage", help="your projects' usage and charges")
    p.add_argument("--from", dest="start", help="first day (default: this month's first)")
    p.add_argument("--to", dest="end", help="last day (default: today)")
    p.add_argument("--group-by", default="project", help="project, queue, pool, type, user …")
    p.set_defaults(run=cmd_usage)

    files.add_parser(sub)
    sandbox_cli.add_parser(sub)
    return top


def _waiting(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=0, help="give up after this many seconds")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between checks")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Output(args.output)
    try:
        return args.run(args, out)
    except CliError as exc:
        if args.output == "json":
            print(json.dumps({"errors": exc.errors or [{"message": str(exc)}]}), file=sys.stderr)
        else:
            print(f"switchyard: {exc}", file=sys.stderr)
            for item in exc.errors[1:] if len(exc.errors) > 1 else []:
                print(f"  {item.get('field')}: {item.get('message')}", file=sys.stderr)
            if exc.errors and exc.errors[0].get("field"):
                first = exc.errors[0]
                got = f" (got {first.get('got')!r})" if first.get("got") is not None else ""
                print(f"  {first['field']}: {first['message']}{got}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
