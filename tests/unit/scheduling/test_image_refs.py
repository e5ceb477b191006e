"""Image references read as Docker reads them, with the site's default registry
(scheduling/decisions/images.py, docs/containers.md)."""

from __future__ import annotations

import pytest

from scheduling.decisions.catalogue import host_problem
from scheduling.decisions.images import (
    ImageRef,
    ImageRefError,
    container_argv,
    container_env,
    container_workdir,
    parse_image_ref,
    registry_is_local,
)

SITE = "registry.example.org"
DIGEST = "sha256:" + "ab" * 32


def parse(text: object, default: str = SITE) -> ImageRef:
    return parse_image_ref(text, default_registry=default)


@pytest.mark.parametrize(
    "text, registry, repository, tag, digest",
    [
        ("demo/tiny", SITE, "demo/tiny", None, None),
        ("python", SITE, "python", None, None),
        ("demo/tiny:2", SITE, "demo/tiny", "2", None),
        (f"demo/tiny@{DIGEST}", SITE, "demo/tiny", None, DIGEST),
        (f"demo/tiny:2@{DIGEST}", SITE, "demo/tiny", "2", DIGEST),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch", "24.01-py3", None),
        ("127.0.0.1:15000/demo/tiny:1", "127.0.0.1:15000", "demo/tiny", "1", None),
        ("localhost/team/tool", "localhost", "team/tool", None, None),
        ("localhost:5000/tool:v1.2_rc", "localhost:5000", "tool", "v1.2_rc", None),
        ("Registry/tool", "Registry", "tool", None, None),  # upper case: a host, as Docker
        ("[::1]:5000/tool", "[::1]:5000", "tool", None, None),
        ("a.b-c/d__e/f-g---h:T_1", "a.b-c", "d__e/f-g---h", "T_1", None),
    ],
)
def test_it_reads_a_reference_as_docker_does(text, registry, repository, tag, digest):
    ref = parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


def test_a_name_without_a_host_goes_to_the_sites_registry_and_library_only_on_docker_hub():
    assert parse("python:3", default="docker.io").name == "docker.io/library/python"
    assert parse("team/python", default="docker.io").name == "docker.io/team/python"
    assert parse("python:3", default="127.0.0.1:15000").name == "127.0.0.1:15000/python"


def test_it_writes_back_what_it_read_and_the_forms_a_node_pulls():
    ref = parse("demo/tiny:2")
    assert str(ref) == f"{SITE}/demo/tiny:2"
    assert parse("demo/tiny").by_tag == f"{SITE}/demo/tiny:latest"
    assert not ref.pinned
    pinned = ref.with_digest(DIGEST)
    assert pinned.pinned and str(pinned) == f"{SITE}/demo/tiny:2@{DIGEST}"
    assert pinned.by_digest == f"{SITE}/demo/tiny@{DIGEST}"
    assert parse(str(pinned)) == pinned
    with pytest.raises(ValueError, match="not pinned"):
        _ = ref.by_digest


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "without spaces"),
        (" demo/tiny", "without spaces"),
        ("demo/Tiny", "lower-case"),
        ("demo//tiny", "component ''"),
        ("demo/tiny/", "component ''"),
        ("-demo/tiny", "component '-demo'"),
        ("demo/ti..ny", "component 'ti..ny'"),
        ("demo/tiny:", "tag"),
        ("demo/tiny:-1", "tag"),
        ("demo/tiny:" + "x" * 129, "tag"),
        ("demo/tiny@sha256:abc", "digest"),
        ("demo/tiny@md5:" + "a" * 32, "digest"),
        ("demo/tiny@" + DIGEST.upper(), "digest"),
        (":1", "name before"),
        ("@" + DIGEST, "name before"),
        ("bad_host:99999x/tool", "registry host"),
        ("demo/" + "a" * 300, "at most 255"),
        ("a" * 600, "at most 512"),
        ("demo/tiny;rm -rf /", "lower-case"),
        (None, "string"),
        (["demo/tiny"], "string"),
    ],
)
def test_it_refuses_what_is_not_a_reference_saying_what_it_expected(text, says):
    with pytest.raises(ImageRefError) as caught:
        parse(text)
    error = caught.value
    assert error.field == "image"
    assert error.got == text
    assert says in str(error)
    assert "expected" in error.message


def test_the_error_names_the_field_it_was_given():
    with pytest.raises(ImageRefError) as caught:
        parse_image_ref("Bad Image", default_registry=SITE, field="pools.gpu.warm_images[0]")
    assert caught.value.field == "pools.gpu.warm_images[0]"
    assert str(caught.value).startswith("pools.gpu.warm_images[0]: expected")


def test_a_bad_default_registry_and_a_bad_digest_are_refused():
    with pytest.raises(ImageRefError) as caught:
        parse_image_ref("demo/tiny", default_registry="not a host")
    assert caught.value.field == "default_registry"
    with pytest.raises(ImageRefError) as caught:
        parse("demo/tiny").with_digest("sha256:short")
    assert caught.value.field == "digest"


@pytest.mark.parametrize(
    "registry, local",
    [
        ("127.0.0.1:15000", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("localhost:5000", True),
        ("[::1]:5000", True),
        ("registry.example.org", False),
        ("10.0.0.1:5000", False),
        ("localhost.example.org", False),
    ],
)
def test_only_the_loopback_is_a_local_registry(registry, local):
    assert registry_is_local(registry) is local


@pytest.mark.parametrize(
    "entrypoint, cmd, command, argv",
    [
        ((), ("python3",), None, ("python3",)),
        ((), ("python3",), ("bash", "-c", "x"), ("bash", "-c", "x")),
        (("/e",), ("cat", "/f"), None, ("/e", "cat", "/f")),
        (("/e",), ("cat", "/f"), ("ls",), ("/e", "ls")),
        (("/e",), (), None, ("/e",)),
        (("/e",), ("cat",), (), ("/e",)),  # an empty command replaces Cmd too
    ],
)
def test_the_command_in_an_image_is_composed_as_docker_run_composes_it(
    entrypoint, cmd, command, argv
):
    assert container_argv(entrypoint, cmd, command) == argv


def test_an_image_with_nothing_to_run_and_no_command_is_refused():
    with pytest.raises(ValueError, match="no Entrypoint or Cmd"):
        container_argv((), (), None)


def test_the_tasks_env_overrides_the_images_in_place_and_adds_the_rest():
    image = ("PATH=/usr/bin:/bin", "LANG=C.UTF-8", "EMPTY=", "broken")
    task = (("LANG", "en_GB.UTF-8"), ("SEED", "1"))
    assert container_env(image, task) == (
        ("PATH", "/usr/bin:/bin"),
        ("LANG", "en_GB.UTF-8"),
        ("EMPTY", ""),
        ("SEED", "1"),
    )
    assert container_env((), ()) == ()


def test_an_image_without_a_working_dir_starts_in_the_root():
    assert container_workdir("") == "/"
    assert container_workdir("/srv/demo") == "/srv/demo"


@pytest.mark.parametrize("host", ["registry", "registry-1", "reg"])
def test_a_registry_name_without_a_dot_or_port_is_refused_everywhere(host):
    # As a full reference, `registry/team/x` names repository registry/team/x on the default
    # registry: the node, which reads the stored reference, would pull from elsewhere.
    assert host_problem(host) is not None
    with pytest.raises(ImageRefError) as caught:
        parse_image_ref("team/x:1", default_registry=host)
    assert caught.value.field == "default_registry"


@pytest.mark.parametrize(
    "host", ["registry.example.org", "registry:5000", "localhost", "127.0.0.1:15000", "Registry"]
)
def test_what_the_catalogue_accepts_the_node_reads_back_as_the_same_registry(host):
    assert host_problem(host) is None
    stored = str(parse_image_ref("team/x:1", default_registry=host))
    again = parse_image_ref(stored, default_registry="localhost")  # as the node reads it
    assert (again.registry, again.repository) == (host, "team/x")
