"""A node's image cache against a real registry (docker/images/registry.sh): tags resolved to
digests, images pulled once, unpacked read-only and run under bubblewrap, evicted least
recently used first but never while a job holds them, and a registry that goes away mid-pull
(docs/containers.md)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from scheduling.backends.images import (
    ImageCache,
    ImageNotFound,
    PullFailed,
    RegistryUnreachable,
    Skopeo,
)
from scheduling.backends.images.layout import blobs_of
from scheduling.decisions.images import container_argv, container_env, container_workdir
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.registry]

JOB_ACCOUNT = "switchyard-job"


def in_image(rootfs: Path, *argv: str, env: tuple[str, ...] = (), chdir: str = "/") -> str:
    """Run argv in the image's root file system as an unprivileged job account, with nothing
    of the host's file system, no network and no capabilities; its stdout."""
    sandbox = ["bwrap", "--ro-bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev"]
    sandbox += ["--tmpfs", "/tmp", "--unshare-all", "--cap-drop", "ALL", "--die-with-parent"]
    sandbox += ["--clearenv", "--chdir", chdir]
    for pair in env:
        name, _, value = pair.partition("=")
        sandbox += ["--setenv", name, value]
    done = subprocess.run(
        ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--init-groups"]
        + sandbox
        + list(argv),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def pulls(cache: ImageCache) -> list[dict]:
    log = cache.root / "pulls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_tag_resolves_to_the_digest_the_registry_serves(cache, ref, registry):
    one, two = cache.resolve(ref("demo/tiny:1")), cache.resolve(ref("demo/tiny:2"))
    shown = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}"]
        + [f"docker://{registry}/demo/tiny:1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert one.digest == shown
    assert two.digest != one.digest
    assert (one.tag, str(one)) == ("1", f"{registry}/demo/tiny:1@{shown}")
    assert cache.resolve(one) == one  # a pinned reference asks no registry


def test_an_image_runs_in_the_sandbox_with_its_own_files_and_none_of_the_hosts(cache, ref):
    image = cache.pull(ref("demo/tiny:1"))
    out = in_image(image.rootfs, "/bin/busybox", "cat", "/etc/os-release", "/etc/switchyard/image")
    assert "ID=demo-tiny" in out and 'VERSION_ID="1"' in out
    assert out.rstrip().endswith("demo-tiny:1")  # the file only this image has
    # The host's /usr (its python3, its libraries) is not there.
    assert Path("/usr/bin/python3").exists()
    assert in_image(image.rootfs, "/bin/sh", "-c", "test -e /usr/bin/python3 || echo absent") == (
        "absent\n"
    )
    # Unpacked read-only: no write bit on anything the image has.
    for path in (image.rootfs, image.rootfs / "etc", image.rootfs / "etc" / "os-release"):
        assert path.lstat().st_mode & 0o222 == 0, path


def test_the_image_config_is_kept_and_runs_as_docker_would_run_it(cache, ref):
    image = cache.pull(ref("demo/tiny:2"))
    config = image.config
    assert config.entrypoint == ("/usr/local/bin/demo-entrypoint",)
    assert config.cmd == ("cat", "/etc/demo-release")
    assert config.workdir == "/srv/demo"
    assert "DEMO_VERSION=2" in config.env
    # Entrypoint then Cmd, in WorkingDir, with Env: what `docker run demo/tiny:2` prints.
    env = tuple(f"{k}={v}" for k, v in container_env(config.env, (("EXTRA", "x"),)))
    out = in_image(
        image.rootfs,
        *container_argv(config.entrypoint, config.cmd, None),
        env=env,
        chdir=container_workdir(config.workdir),
    )
    assert out == "demo/tiny 2 entrypoint in /srv/demo\n2\n"
    # A task's command replaces Cmd, not the Entrypoint (`docker run demo/tiny:2 sh -c ...`).
    argv = container_argv(config.entrypoint, config.cmd, ("/bin/sh", "-c", "echo $EXTRA"))
    out = in_image(image.rootfs, *argv, env=env, chdir=config.workdir)
    assert out == "demo/tiny 2 entrypoint in /srv/demo\nx\n"
    # Kept beside the root file system: a later process reads the same.
    again = ImageCache(cache.root).get(image.digest)
    assert again is not None and again.config == config


def test_the_python_image_runs_python(cache, ref):
    image = cache.pull(ref("switchyard/python:3"))
    assert image.config.cmd == ("python3",)
    out = in_image(
        image.rootfs,
        "python3",
        "-c",
        "import json, sys; print(json.dumps(sys.version_info[:2]))",
        env=image.config.env,
    )
    assert out == "[3, 11]\n"
    assert image.pull_bytes > 5_000_000 and image.rootfs_bytes > image.pull_bytes


def test_two_tags_of_one_image_share_their_base_layer_and_a_rollback_shows(cache, ref):
    two = cache.pull(ref("demo/tiny:2"))
    one = cache.pull(ref("demo/tiny:1"))
    assert in_image(two.rootfs, "/bin/cat", "/etc/demo-release") == "2\n"
    assert in_image(one.rootfs, "/bin/cat", "/etc/demo-release") == "1\n"
    # The busybox layer came once: the second pull moved only what differs.
    assert one.image_bytes > 1_000_000 and one.pull_bytes < 10_000
    assert [p["digest"] for p in pulls(cache)] == [two.digest, one.digest]


def test_a_pull_tells_its_progress_as_the_layers_arrive(cache, ref, flaky_registry):
    # Through the rate-limited relay the 21 MB layer takes seconds: several samples on the way.
    seen: list[tuple[int, int]] = []
    image = cache.pull(
        ref("switchyard/python:3", host=flaky_registry.address),
        progress=lambda done, total: seen.append((done, total)),
    )
    totals = {total for _, total in seen}
    assert totals == {image.image_bytes}
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == image.image_bytes
    assert len([d for d in done if 0 < d < image.image_bytes]) >= 3, seen


def test_a_missing_tag_a_missing_image_and_a_registry_that_is_not_there_say_so(
    cache, ref, registry
):
    with pytest.raises(ImageNotFound) as caught:
        cache.pull(ref("demo/tiny:no-such-tag"))
    assert caught.value.reason == (
        f"tag no-such-tag not found in {registry}/demo/tiny (tags there: 1, 2)"
    )
    assert not caught.value.retryable
    with pytest.raises(ImageNotFound) as caught:
        cache.pull(ref("demo/absent:1"))
    assert caught.value.reason == f"no image demo/absent in registry {registry}"
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(RegistryUnreachable) as caught:
        cache.pull(ref("demo/tiny:1", host=gone))
    assert caught.value.reason.startswith(f"registry {gone} unreachable")
    assert caught.value.retryable
    assert cache.cached() == []


def test_concurrent_pulls_of_one_image_make_one_pull(cache, ref, flaky_registry):
    # Through the rate-limited relay the pull lasts seconds: every process starts inside it.
    image_ref = cache.resolve(ref("switchyard/python:3", host=flaky_registry.address))
    code = (
        "import sys; from scheduling.backends.images import ImageCache;"
        " from scheduling.decisions.images import parse_image_ref;"
        " r = parse_image_ref(sys.argv[2], default_registry='unused.example');"
        " print(ImageCache(sys.argv[1]).pull(r).rootfs)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(cache.root), str(image_ref)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    assert len({out for out, _ in outs}) == 1
    assert [p["digest"] for p in pulls(cache)] == [image_ref.digest]


def test_eviction_takes_the_least_recently_used_and_never_a_pinned_image(cache, ref):
    one = cache.pull(ref("demo/tiny:1"))
    two = cache.pull(ref("demo/tiny:2"))
    python = cache.pull(ref("switchyard/python:3"))
    # tiny:1 is the least recently used, and a job (another process) holds it.
    old = time.time() - 3600
    os.utime(cache.root / "images" / one.digest.split(":")[1] / "image.json", (old, old))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from scheduling.backends.images import ImageCache;"
            " p = ImageCache(sys.argv[1]).pin(sys.argv[2]); print('pinned', flush=True);"
            " sys.stdin.read()",
            str(cache.root),
            one.digest,
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "pinned\n"
        removed = cache.evict(cap_bytes=0)
        assert removed == [two.digest, python.digest]  # the least recently used first
        assert [i.digest for i in cache.cached()] == [one.digest]
        # What is left runs, and every blob left is one it uses (the shared base included).
        assert in_image(one.rootfs, "/bin/cat", "/etc/demo-release") == "1\n"
        layout = cache.root / "layouts" / one.digest.split(":")[1]
        left = {f"sha256:{p.name}" for p in (cache.blobs / "sha256").iterdir()}
        assert left == blobs_of(layout, cache.blobs)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert cache.evict(cap_bytes=0) == [one.digest]
    assert cache.cached() == [] and list((cache.blobs / "sha256").iterdir()) == []


def test_a_pull_over_the_cap_evicts_older_images_but_not_itself(job_root, ref):
    cache = ImageCache(job_root / "capped", cap_bytes=10_000_000, skopeo=Skopeo(timeout_s=120))
    one = cache.pull(ref("demo/tiny:1"))
    with cache.use(ref("demo/tiny:2")) as two:  # a running job holds tiny:2
        python = cache.pull(ref("switchyard/python:3"))  # alone over the cap
        assert {i.digest for i in cache.cached()} == {two.digest, python.digest}
    assert cache.get(one.digest) is None
    # A job that starts after its image was evicted gets it again.
    with cache.use(ref("demo/tiny:1")) as again:
        assert in_image(again.rootfs, "/bin/cat", "/etc/demo-release") == "1\n"


def test_a_registry_that_goes_away_mid_pull_fails_with_a_reason_and_a_retry_succeeds(
    cache, ref, flaky_registry
):
    image_ref = cache.resolve(ref("switchyard/python:3", host=flaky_registry.address))
    flaky_registry.cut_after(3_000_000)  # inside the 20 MB Python layer
    with pytest.raises(RegistryUnreachable) as caught:
        cache.pull(image_ref)
    assert flaky_registry.cut
    assert caught.value.reason.startswith(f"registry {flaky_registry.address} unreachable")
    assert caught.value.retryable
    # Nothing half-made is left to be mistaken for the image.
    assert cache.get(image_ref.digest) is None
    assert list((cache.root / "tmp").iterdir()) == []
    assert list((cache.root / "layouts").iterdir()) == []

    flaky_registry.restore()
    image = cache.pull(image_ref)
    assert in_image(image.rootfs, "python3", "-c", "print('back')", env=image.config.env) == (
        "back\n"
    )


def test_a_tag_moved_after_it_was_resolved_does_not_change_what_the_digest_pulls(
    cache, ref, registry
):
    # A repository of this test's own, its tag first on tiny:1's content, then moved to 2's.
    moving = f"test/moving-{uuid.uuid4().hex[:8]}:latest"

    def point(tag_from: str) -> None:
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--src-tls-verify=false", "--dest-tls-verify=false"]
            + [f"docker://{registry}/{tag_from}", f"docker://{registry}/{moving}"],
            check=True,
            capture_output=True,
        )

    point("demo/tiny:1")
    submitted = cache.resolve(ref(moving))
    point("demo/tiny:2")
    assert cache.resolve(ref(moving)).digest != submitted.digest
    # What was resolved before the move (the task's recorded digest) still pulls version 1.
    image = cache.pull(submitted)
    assert in_image(image.rootfs, "/bin/cat", "/etc/demo-release") == "1\n"


def test_the_caches_locks_are_the_workers_alone_and_a_held_gc_lock_does_not_stall_pulls(
    job_root, ref
):
    """Any account that could open a lock (a read is enough for flock) could hold gc.lock and
    stall every pull of the node, or pin an image for ever."""
    old = os.umask(0o022)  # systemd's default for the worker
    try:
        cache = ImageCache(job_root / "images", skopeo=Skopeo(timeout_s=120), unpack_timeout_s=4)
        with cache.pin(cache.pull(ref("demo/tiny:1")).digest):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.locks.stat().st_mode) == 0o700
    files = [cache.root / "gc.lock", *(p for p in cache.locks.iterdir() if p.is_file())]
    assert {p.suffix for p in files} >= {".lock", ".pull", ".use"}, files
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}
    # Held (as collection holds it) for longer than the pull's timeout: the pull gives up.
    fd = os.open(cache.root / "gc.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(20, os.close, [fd]).start()
    t0 = time.monotonic()
    with pytest.raises(PullFailed, match="being cleaned for over 4s"):
        cache.pull(ref("demo/tiny:2"))
    assert time.monotonic() - t0 < 15
