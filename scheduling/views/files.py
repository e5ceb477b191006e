"""The Files page: browse your projects' and your own storage folders, upload, download,
remove, make a folder, read a text file (docs/storage.md). Thin: every file operation is a
selector or a service, done as your job account."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render

from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling.presenters.files import files_url
from scheduling.selectors import task_get_for_user
from scheduling.selectors.storage import (
    Folder,
    area_folders,
    file_info,
    file_open,
    folder_get_for_user,
    folder_listing,
    folders_for_user,
)
from scheduling.services.files import file_delete, file_upload, folder_make, folders_prepare

TEXT_LIMIT = 256 * 1024  # a text file is shown up to this; longer ones are downloaded


@login_required
def files_home(request: SignedInRequest) -> HttpResponse:
    folders = folders_for_user(request.user)
    folders_prepare(user=request.user)  # those not made yet are made by a worker
    return render(
        request,
        "scheduling/files.html",
        {"folders": [(f, files_url(f)) for f in folders], "folder": None},
    )


@login_required
def files_browse(
    request: SignedInRequest, area: str, path: str = ""
) -> HttpResponse | FileResponse:
    folders = area_folders(request.user, area)
    if not path and folders[0].owner:  # an area's root: your folders are on the Files page
        return redirect("files")
    folder, rest = folder_get_for_user(request.user, area, path)
    here = files_url(folder, rest)
    if request.method == "POST":
        try:
            done = _change(request, folder, rest)
        except ApplicationError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, done)
        return redirect(here)
    try:
        info = file_info(request.user, folder, rest)
    except ApplicationError as exc:
        if exc.status == 404 and rest and not _task_folder_to_come(request, rest):
            raise Http404(str(exc)) from None
        if exc.status != 404:  # a link, a bad name, a denied folder: said as it is
            return HttpResponse(str(exc), status=exc.status, content_type="text/plain")
        folders_prepare(user=request.user)
        info = {"type": "missing"}
    if info["type"] == "file":
        return _file(request, folder, rest, info)
    if info["type"] not in ("folder", "missing"):  # a link (a job may have made it), a FIFO…
        name = rest.rstrip("/").rpartition("/")[2]
        messages.error(request, f"{name} is a {info['type']}: Files opens only files and folders")
        return redirect(files_url(folder, rest.rstrip("/").rpartition("/")[0]))
    listing: dict = {"entries": [], "truncated": False, "limit": 0}
    if info["type"] == "folder":
        listing = folder_listing(request.user, folder, rest)
    entries: list[dict] = listing["entries"]
    crumbs, walked = [(folder.url_path, files_url(folder))], ""
    for part in [p for p in rest.split("/") if p]:
        walked = f"{walked}/{part}".lstrip("/")
        crumbs.append((part, files_url(folder, walked)))
    rows = [
        (
            {**entry, "mtime_at": datetime.fromtimestamp(entry["mtime"], UTC)},
            files_url(folder, f"{rest.rstrip('/')}/{entry['name']}".lstrip("/")),
        )
        for entry in entries
    ]
    context = {
        "folders": [(f, files_url(f)) for f in folders_for_user(request.user)],
        "folder": folder,
        "crumbs": crumbs,
        "rows": rows,
        "missing": info["type"] == "missing",
        # A task's folder before the task made it: the task page links here from its submit.
        "task_to_come": info["type"] == "missing" and bool(rest),
        "truncated": listing["truncated"],
        "listed_max": listing["limit"],
        "here": here,
    }
    return render(request, "scheduling/files.html", context)


def _task_folder_to_come(request: SignedInRequest, rest: str) -> bool:
    """`rest` is the working folder of a task the user sees that has not made it yet
    (`tasks/<id>`), or the folder of the tasks' folders (`tasks`): a task's page links there
    before the task starts."""
    head, _, task_id = rest.strip("/").partition("/")
    if head != "tasks" or not (task_id.isdigit() or not task_id):
        return False
    if not task_id:
        return True
    try:
        task_get_for_user(request.user, int(task_id))
    except Http404:
        return False
    return True


def _file(
    request: SignedInRequest, folder: Folder, rest: str, info: dict
) -> HttpResponse | FileResponse:
    fd, size = file_open(request.user, folder, rest)
    if request.GET.get("view") != "text" or size > TEXT_LIMIT:
        stream = open(fd, "rb")  # noqa: SIM115 - the response closes it once sent
        response = FileResponse(stream, as_attachment=True, filename=info["name"])
        response["Content-Length"] = str(size)
        return response
    with open(fd, "rb") as f:
        text = f.read(TEXT_LIMIT).decode("utf-8", "replace")
    parent = rest.rpartition("/")[0]
    context = {
        "folder": folder,
        "name": info["name"],
        "text": text,
        "back": files_url(folder, parent),
        "download": files_url(folder, rest),
    }
    return render(request, "scheduling/file_text.html", context)


def _change(request: SignedInRequest, folder: Folder, rest: str) -> str:
    """Carry out the page's form: upload, remove or make a folder; what was done, in words."""
    action = request.POST.get("action")
    prefix = f"{rest.rstrip('/')}/".lstrip("/")
    if action == "upload":
        uploaded = request.FILES.get("file")
        if uploaded is None or not uploaded.name:
            raise ApplicationError("choose a file to upload", field="file")
        file_upload(
            user=request.user,
            folder=folder,
            path=prefix + uploaded.name,
            chunks=uploaded.chunks(),
            expected=uploaded.size or 0,
        )
        return f"Uploaded {uploaded.name} ({uploaded.size} bytes)."
    name = request.POST.get("name", "")
    if not name or "/" in name:
        raise ApplicationError("a name, without /, is needed", field="name", got=name[:80])
    if action == "delete":
        file_delete(user=request.user, folder=folder, path=prefix + name)
        return f"Removed {name}."
    if action == "mkdir":
        folder_make(user=request.user, folder=folder, path=rest, name=name)
        return f"Made the folder {name}."
    raise ApplicationError("unknown action", field="action", got=(action or "")[:20])
