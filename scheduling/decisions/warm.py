"""A pool's warm images: the references its nodes keep pulled ahead of use
(docs/containers.md, "Pre-pulling"). Pure: what the admin console checks, and what the
engine asks the backends to pull."""

from __future__ import annotations

from scheduling.decisions.images import ImageRefError, parse_image_ref

MAX_WARM_IMAGES = 20


def default_registry(registry: str, registries: list[str]) -> str:
    """The registry a name without a host is on: the site's default (SWITCHYARD_IMAGE_REGISTRY),
    else the first it allows, else none ("" — then every warm image must name its registry)."""
    return registry or (registries[0] if registries else "")


def warm_images_problem(value: object, *, default_registry: str) -> str | None:
    """Why `value` is not a list of warm images (expected, got), or None."""
    if not isinstance(value, list):
        return f"expected a list of image references, got {value!r}"
    if len(value) > MAX_WARM_IMAGES:
        return f"expected at most {MAX_WARM_IMAGES} images, got {len(value)}"
    for at, text in enumerate(value):
        try:
            ref = parse_image_ref(
                text, default_registry=default_registry or "localhost", field=f"[{at}]"
            )
        except ImageRefError as exc:
            return str(exc)
        if not default_registry and f"{ref.registry}/" not in str(text):
            return (
                f"[{at}]: expected a reference naming its registry (this site has no default "
                f"registry), got {text!r}"
            )
    if len(set(value)) != len(value):
        return f"expected each image once, got {value!r}"
    return None


def warm_references(pools_images: list[list[str]], *, default_registry: str) -> list[str]:
    """The references of these pools' warm images, named in full, each once, in order; a
    reference that does not parse (configuration from before a rule) is left out."""
    out: list[str] = []
    for images in pools_images:
        for text in images or ():
            try:
                ref = parse_image_ref(text, default_registry=default_registry or "localhost")
            except ImageRefError:
                continue
            if str(ref) not in out:
                out.append(str(ref))
    return out
