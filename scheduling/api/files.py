"""REST API v1 for Files: the storage folders a user may open, and what is in them
(docs/storage.md). `/api/v1/files/<area>/<owner>/<path>` (a site area has no owner part):
GET lists a folder (JSON) or downloads a file (streamed); PUT uploads a file (the body,
streamed, at most SWITCHYARD_FILES_UPLOAD_MAX_BYTES); DELETE removes a file or an empty
folder; POST `{"mkdir": NAME}` to a folder makes a folder in it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import cast

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
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

CHUNK = 1 << 20


class _Raw(BaseParser):
    """Leaves the body unread: an upload is streamed by the view, never parsed."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return None


def folder_data(folder: Folder) -> dict:
    return {
        "area": folder.area.name,
        "owner": folder.owner,
        "path": folder.url_path,
        "host_path": folder.path,
        "writable": folder.writable,
        "jobs_read_only": folder.area.read_only,
        "quota_bytes": folder.area.quota_bytes,
    }


def body_chunks(request: SignedInApiRequest) -> Iterator[bytes]:
    """The request's body, read as it arrives (Django bounds it by its Content-Length)."""
    raw = request._request
    while chunk := raw.read(CHUNK):
        yield chunk


def declared_length(request: SignedInApiRequest) -> int:
    """The upload's Content-Length (a body without one is refused with 411 before a view)."""
    raw = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(raw)
    except ValueError:
        length = -1
    if length < 0:
        raise ApplicationError(
            "Content-Length must be a whole number of bytes", field="Content-Length", got=raw[:40]
        )
    return length


def download(fd: int, size: int, name: str) -> FileResponse:
    response = FileResponse(
        os.fdopen(fd, "rb"),
        as_attachment=True,
        filename=name,
        content_type="application/octet-stream",
    )
    response["Content-Length"] = str(size)
    return response


_OBJECT = {200: OpenApiTypes.OBJECT}


class FileRoot(APIView):
    @extend_schema(
        operation_id="files_folders", summary="The folders you may open", responses=_OBJECT
    )
    def get(self, request: SignedInApiRequest) -> Response:
        folders = folders_for_user(request.user)
        folders_prepare(user=request.user)  # those not made yet are made by a worker
        return Response({"folders": [folder_data(f) for f in folders]})


class FileArea(APIView):
    @extend_schema(
        operation_id="files_area_folders", summary="Your folders of one area", responses=_OBJECT
    )
    def get(self, request: SignedInApiRequest, area: str) -> Response:
        folders = area_folders(request.user, area)
        return Response({"folders": [folder_data(f) for f in folders]})


class FileDetail(APIView):
    parser_classes = [_Raw]

    def _resolve(self, request: SignedInApiRequest, area: str, path: str) -> tuple[Folder, str]:
        return folder_get_for_user(request.user, area, path)

    @extend_schema(
        operation_id="files_get",
        summary="List a folder (JSON), or download a file (its bytes)",
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: SignedInApiRequest, area: str, path: str) -> Response:
        folder, rest = self._resolve(request, area, path)
        info = file_info(request.user, folder, rest)
        if info["type"] == "folder":
            listing = folder_listing(request.user, folder, rest)
            return Response(
                {
                    "folder": folder_data(folder),
                    "path": rest,
                    "entries": listing["entries"],
                    "truncated": listing["truncated"],
                }
            )
        if info["type"] != "file":
            raise ApplicationError(
                f"is a {info['type']}: only files and folders are opened here", field="path"
            )
        fd, size = file_open(request.user, folder, rest)
        return cast(Response, download(fd, size, info["name"]))

    @extend_schema(
        summary="Upload a file (the body, streamed)", request=bytes, responses={201: dict}
    )
    def put(self, request: SignedInApiRequest, area: str, path: str = "") -> Response:
        folder, rest = self._resolve(request, area, path)
        entry = file_upload(
            user=request.user,
            folder=folder,
            path=rest,
            chunks=body_chunks(request),
            expected=declared_length(request),
        )
        return Response(entry, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="files_remove",
        summary="Remove a file or an empty folder",
        responses={204: None},
    )
    def delete(self, request: SignedInApiRequest, area: str, path: str) -> Response:
        folder, rest = self._resolve(request, area, path)
        file_delete(user=request.user, folder=folder, path=rest)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="files_mkdir",
        summary='Make a folder in this one: {"mkdir": NAME}',
        request={"application/json": OpenApiTypes.OBJECT},
        responses={201: OpenApiTypes.OBJECT},
    )
    def post(self, request: SignedInApiRequest, area: str, path: str) -> Response:
        folder, rest = self._resolve(request, area, path)
        raw = request._request.read(64 * 1024 + 1)
        try:
            body = json.loads(raw) if len(raw) <= 64 * 1024 else None
        except ValueError:
            body = None
        name = body.get("mkdir") if isinstance(body, dict) else None
        if not isinstance(name, str):
            raise ApplicationError('send {"mkdir": "<name>"} as JSON', field="mkdir", got=None)
        entry = folder_make(user=request.user, folder=folder, path=rest, name=name)
        return Response(entry, status=status.HTTP_201_CREATED)
