"""Talking to a registry through skopeo: a tag's digest, and a copy of an image by digest into
an OCI layout. Failures become ImageError subclasses whose message a researcher can read
(docs/containers.md)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduling.backends.base import BackendError
from scheduling.decisions.images import ImageRef, registry_is_local

log = logging.getLogger(__name__)


class ImageError(BackendError):
    """An image could not be had; `reason` says why in words, `retryable` whether the same
    request may succeed later (a registry that was down) or never will (no such tag)."""

    retryable = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RegistryUnreachable(ImageError):
    retryable = True


class ImageNotFound(ImageError):
    """The registry answers but has no such repository, tag or digest."""


class RegistryDenied(ImageError):
    """The registry wants credentials this node does not have, or refuses them."""


class BadImage(ImageError):
    """The image is here but no job may run it: its config says something a job cannot be
    run with, or it would unpack to more than the node allows. Pulling again will not help."""


class PullFailed(ImageError):
    """Anything else skopeo or umoci refused; the reason is their last words."""

    retryable = True


_UNREACHABLE = (
    "connection refused",
    "connection reset",
    "no such host",
    "i/o timeout",
    "timeout",
    "network is unreachable",
    "no route to host",
    "unexpected eof",
    ": eof",
    "broken pipe",
    "server misbehaving",
    "tls: ",
    "http: server gave http response to https client",
)
_MISSING = ("manifest unknown", "name unknown", "repository name not known", "not found")
_DENIED = ("unauthorized", "denied", "authentication required")


# skopeo logs as `time="..." level=fatal msg="..."`: the message is what a person reads.
_MSG_RE = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    text = lines[-1] if lines else "no output"
    found = _MSG_RE.search(text)
    if found:
        text = re.sub(r"\\(.)", r"\1", found.group(1))
    return text if len(text) <= 300 else text[:297] + "..."


def classify(stderr: str, ref: ImageRef, *, what: str) -> ImageError:
    """The ImageError for skopeo's `stderr` after it failed on `ref` (`what`: the tag or
    digest it was after)."""
    low = stderr.lower()
    # What the registry (or whatever it redirected skopeo to) answered goes to the
    # operators' log only: a reason is shown to the task's owner, who may have pointed the
    # pull at a service of the site's own network to read its answers.
    log.warning("skopeo failed on %s: %s", ref, _last_words(stderr))
    if any(marker in low for marker in _DENIED):
        return RegistryDenied(f"registry {ref.registry} refused access to {ref.repository}")
    if "manifest unknown" in low:
        return ImageNotFound(f"{what} not found in {ref.name}")
    if any(marker in low for marker in _MISSING):
        return ImageNotFound(f"no image {ref.repository} in registry {ref.registry}")
    if any(marker in low for marker in _UNREACHABLE):
        return RegistryUnreachable(f"registry {ref.registry} unreachable")
    return PullFailed(f"pulling {ref} failed (the worker's log has the registry's answer)")


@dataclass(frozen=True, slots=True)
class Skopeo:
    """skopeo as the cache uses it. `insecure` lists registries spoken to over plain HTTP
    besides the loopback ones (which Docker allows too); `timeout_s` bounds one call."""

    command: str = "skopeo"
    insecure: tuple[str, ...] = ()
    timeout_s: float = 600.0

    def _tls(self, ref: ImageRef) -> str:
        plain = registry_is_local(ref.registry) or ref.registry in self.insecure
        return "false" if plain else "true"

    def _run(
        self,
        args: Sequence[str],
        ref: ImageRef,
        *,
        what: str,
        poll: Callable[[], None] | None = None,
    ) -> bytes:
        """skopeo's stdout; `poll` is called about every 0.2 s while it runs (what it raises
        kills skopeo and is raised)."""
        try:
            proc = subprocess.Popen(
                [self.command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except FileNotFoundError as e:
            raise PullFailed(f"{self.command} is not installed on this node") from e
        deadline = time.monotonic() + self.timeout_s
        with proc:
            while True:
                try:
                    out, err = proc.communicate(timeout=0.2 if poll else self.timeout_s)
                    break
                except subprocess.TimeoutExpired as e:
                    if time.monotonic() >= deadline or poll is None:
                        proc.kill()
                        proc.communicate()
                        raise RegistryUnreachable(
                            f"registry {ref.registry} did not answer in {self.timeout_s:g}s"
                        ) from e
                    try:
                        poll()
                    except BaseException:  # the poll stops the copy (too many bytes came)
                        proc.kill()
                        proc.communicate()
                        raise
        if proc.returncode != 0:
            raise classify(err.decode(errors="replace"), ref, what=what)
        return out

    def digest(self, ref: ImageRef) -> str:
        """The digest `ref`'s tag names now (`latest` when it has none): the sha256 of the
        manifest the registry serves, which is what the registry itself calls its digest."""
        tag = ref.tag or "latest"
        try:
            raw = self._run(
                ["inspect", "--raw", f"--tls-verify={self._tls(ref)}", f"docker://{ref.by_tag}"],
                ref,
                what=f"tag {tag}",
            )
        except ImageNotFound as e:
            # Registries answer "manifest unknown" for a missing repository too: the tag list
            # tells the two apart, and names the tags there are.
            tags = self.tags(ref)
            if tags is None:
                raise ImageNotFound(f"no image {ref.repository} in registry {ref.registry}") from e
            there = ", ".join(sorted(tags)[:10]) + (" ..." if len(tags) > 10 else "")
            raise ImageNotFound(f"{e.reason} (tags there: {there or 'none'})") from e
        if not raw.strip():
            raise PullFailed(f"registry {ref.registry} sent an empty manifest for {ref.by_tag}")
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def tags(self, ref: ImageRef) -> list[str] | None:
        """The tags of `ref`'s repository; None when the registry has no such repository."""
        try:
            out = self._run(
                ["list-tags", f"--tls-verify={self._tls(ref)}", f"docker://{ref.name}"],
                ref,
                what="tags",
            )
        except ImageError as e:
            if "404" in e.reason or isinstance(e, ImageNotFound):
                return None
            raise
        return [str(t) for t in json.loads(out).get("Tags") or []]

    def manifest(self, ref: ImageRef) -> bytes:
        """The manifest the pinned `ref` names, as the registry serves it."""
        return self._run(
            ["inspect", "--raw", f"--tls-verify={self._tls(ref)}", f"docker://{ref.by_digest}"],
            ref,
            what=f"image {ref.digest}",
        )

    def copy(
        self, ref: ImageRef, layout: str, name: str, *, poll: Callable[[], None] | None = None
    ) -> None:
        """Copy the pinned `ref` into the OCI layout at `layout`, tagged `name` there;
        `poll` is called about every 0.2 s while the copy runs."""
        self._run(
            [
                "copy",
                "--quiet",
                f"--src-tls-verify={self._tls(ref)}",
                f"docker://{ref.by_digest}",
                f"oci:{layout}:{name}",
            ],
            ref,
            what=f"image {ref.digest}",
            poll=poll,
        )
