"""The parts of running a task in an image that need no registry (docs/containers.md): which
images a site allows, the sandbox's system built from an image's root file system, and what
runs in it (the whole is tested against the real registry in tests/integration/images/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scheduling.backends.images import CachedImage, ImageConfig
from scheduling.backends.local.images import BUSYBOX, busybox_limits, in_image, rootfs_binds
from scheduling.decisions.images import ImageRefError, image_allowed
from scheduling.spec import TaskSpec

REG = "registry.example.org"


def allowed(text, **kw):
    args = {"registries": [REG], "default_registry": "", "pool": "cpu", "runs_images": True}
    return image_allowed(text, **{**args, **kw})


def test_a_site_without_registries_refuses_every_image_saying_so():
    with pytest.raises(ImageRefError) as e:
        allowed("demo/tiny:1", registries=[])
    assert e.value.field == "image" and "no image registry configured" in e.value.message


def test_a_name_without_a_host_is_on_the_default_registry_else_the_first_allowed():
    assert allowed("demo/tiny:1").name == f"{REG}/demo/tiny"
    other = allowed("demo/tiny:1", registries=[REG, "other.org"], default_registry="other.org")
    assert other.name == "other.org/demo/tiny"


def test_a_registry_not_allowed_is_refused_naming_those_that_are():
    with pytest.raises(ImageRefError) as e:
        allowed("evil.example.com/x:1", field="tasks[1].image")
    assert e.value.field == "tasks[1].image"
    assert f"expected an image from {REG}" in e.value.message and "evil.example.com" in str(e.value)


def test_a_pool_whose_backend_runs_no_images_refuses_one_naming_the_pool():
    with pytest.raises(ImageRefError) as e:
        allowed("demo/tiny:1", runs_images=False, pool="gpu-a100")
    assert "pool gpu-a100 does not run containers" in e.value.message


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    for folder in ("bin", "etc", "srv/demo", "var/lib/x", "var/log"):
        (root / folder).mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=test\n")
    (root / "lib").symlink_to("usr/lib")
    (root / "marker").write_text("m")
    return root


def ending_at(args: list[str], dst: str) -> list[str]:
    """The bubblewrap option that makes `dst`, with its two arguments."""
    at = args.index(dst)
    return args[at - 2 : at + 1]


def test_an_images_top_level_entries_are_bound_read_only_and_links_made_as_links(rootfs):
    args = rootfs_binds(str(rootfs), ["/dev", "/proc", "/tmp"])
    assert ending_at(args, "/bin") == ["--ro-bind", f"{rootfs}/bin", "/bin"]
    assert ending_at(args, "/lib") == ["--symlink", "usr/lib", "/lib"]
    assert ending_at(args, "/marker") == ["--ro-bind", f"{rootfs}/marker", "/marker"]
    assert "--bind" not in args  # nothing of the image is writable


def test_a_folder_on_the_way_to_a_mount_is_made_and_its_entries_bound_one_by_one(rootfs):
    args = rootfs_binds(str(rootfs), ["/var/lib/switchyard/jobs", "/srv/demo"])
    pairs = list(zip(args, args[1:], strict=False))
    assert ("--dir", "/var") in pairs and ("--dir", "/var/lib") in pairs
    assert ("--ro-bind", f"{rootfs}/var/log") in pairs  # beside the way: bound whole
    assert ("--ro-bind", f"{rootfs}/var/lib/x") in pairs
    # A mount point the image has: made, its entries not bound (the mount covers them).
    assert ("--dir", "/srv/demo") in pairs
    assert not any(a.startswith(f"{rootfs}/srv/demo/") for a in args)
    assert ("--ro-bind", f"{rootfs}/var") not in pairs


def image(tmp_path: Path, **config) -> CachedImage:
    (tmp_path / "rootfs" / "srv" / "demo").mkdir(parents=True, exist_ok=True)
    return CachedImage(
        digest="sha256:" + "a" * 64,
        reference="r/x:1",
        rootfs=tmp_path / "rootfs",
        config=ImageConfig(**config),
        rootfs_bytes=0,
        image_bytes=0,
        pull_bytes=0,
        pull_seconds=0.0,
        last_used=0.0,
    )


SITE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/jobs/k/home", "TMPDIR": "/tmp"}


def test_what_runs_is_the_entrypoint_then_the_command_or_else_the_cmd(tmp_path):
    img = image(tmp_path, entrypoint=("/entry",), cmd=("default",))
    spec = TaskSpec(name="t", project="p", command=("mine", "arg"))
    assert in_image(img, spec, dict(SITE_ENV), script="/s", work="/w")[0] == [
        "/entry",
        "mine",
        "arg",
    ]
    bare = TaskSpec(name="t", project="p")
    assert in_image(img, bare, dict(SITE_ENV), script="/s", work="/w")[0] == ["/entry", "default"]
    script = TaskSpec(name="t", project="p", script="echo hi")
    assert in_image(img, script, dict(SITE_ENV), script="/s", work="/w")[0] == [
        "/entry",
        "/bin/sh",
        "/s",
    ]


def test_the_images_env_comes_under_the_tasks_and_home_stays_the_jobs(tmp_path):
    img = image(tmp_path, env=("PATH=/opt/bin:/bin", "HOME=/root", "A=image", "B=image"))
    spec = TaskSpec(name="t", project="p", command=("x",), env=(("B", "task"),))
    env = in_image(img, spec, {**SITE_ENV, "B": "task"}, script="/s", work="/w")[1]
    assert env["PATH"] == "/opt/bin:/bin"  # the image's, not the site's
    assert env["HOME"] == "/jobs/k/home" and env["A"] == "image" and env["B"] == "task"
    # A PATH the task sets wins over the image's.
    mine = TaskSpec(name="t", project="p", command=("x",), env=(("PATH", "/mine"),))
    env = in_image(img, mine, {**SITE_ENV, "PATH": "/mine"}, script="/s", work="/w")[1]
    assert env["PATH"] == "/mine"


def test_it_starts_in_the_images_workdir_or_its_own_folder_when_the_image_lacks_one(tmp_path):
    spec = TaskSpec(name="t", project="p", command=("x",))
    has = image(tmp_path, workdir="/srv/demo")
    assert in_image(has, spec, dict(SITE_ENV), script="/s", work="/w")[2] == "/srv/demo"
    lacks = image(tmp_path, workdir="/nowhere")
    assert in_image(lacks, spec, dict(SITE_ENV), script="/s", work="/w")[2] == "/w"
    assert in_image(image(tmp_path), spec, dict(SITE_ENV), script="/s", work="/w")[2] == "/w"


def test_the_limits_are_set_by_the_bound_busybox_in_512_byte_blocks():
    argv = busybox_limits(64, 1 << 20)
    assert argv[:3] == [BUSYBOX, "sh", "-c"]
    assert "ulimit -c 0 -u 64 -f 2048 && exec" in argv[3]
    assert os.path.isabs(BUSYBOX)
