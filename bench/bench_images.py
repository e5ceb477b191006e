"""Tasks in container images (docs/containers.md): agent submit → running with an image,
cached or not, beside the same tasks without one; and pull and unpack throughput of a 100 MB
image (target: with the image cached, p50 within 1.5× of no image).

Run: `.venv/bin/python bench/bench_images.py` (as root: it starts the project's registry with
`docker/images/registry.sh start`). Prints one JSON line; `run()` returns the same dict for
`bench/run_all.py`.

The images are pushed to that registry by this script, straight through the registry's HTTP
API, and are the same bytes every run (pushed once, then found there):
- `bench/image:warm` and `bench/image:cold-<i>`: switchyard/base:1's busybox tree with a
  marker file (`/etc/switchyard/bench`) in one layer, so no two share a blob: each cold image
  is a whole pull (about 1 MB compressed, 2 MB unpacked);
- `bench/big:<recipe>`: the base layer and a layer of 100 MB of random bytes (from a fixed
  seed: incompressible, like model weights), 101 MB compressed.

Latency: bench_latency's stack and phases (gunicorn, `celery worker -B`, beat polling every
100 ms, agent tasks `sleep 0.1` over HTTP open-loop at a steady rate), on a portal allowed that
registry (SWITCHYARD_IMAGE_REGISTRIES) whose catalogue lists `bench/image` (any tag) for agent
tasks. At 5/s and then 20/s, three phases one after another on the one stack:
- `none`: no image (the floor, measured in the same run);
- `warm`: every task names `bench/image:warm`, pulled into the backend's cache beforehand
  (one task ran it before the first warm phase);
- `cold`: every task names its own `bench/image:cold-<i>`, in no cache yet: the submission
  asks the registry for its tag, the backend pulls and unpacks it before the job starts.
The warm/none ratio of the p50s is the figure judged.

Throughput: ImageCache.pull (scheduling/backends/images/cache.py, what the backend's puller
runs) of `bench/big` by digest into a fresh cache, 3 times, with its own split (`pull`:
skopeo copy; `unpack`: the layers measured, `umoci raw unpack`, sealed), beside the floor on
the same disk in the same repeat: `curl` of the big layer from the registry to a file, `tar
-xzf` of that file; and `umoci raw unpack` alone on the pulled layout.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench import bench_latency  # noqa: E402
from scheduling.backends.images import ImageCache, Skopeo  # noqa: E402
from scheduling.decisions.images import parse_image_ref  # noqa: E402

COMMAND = ".venv/bin/python bench/bench_images.py (as root: it starts the registry)"
REGISTRY_SH = c.ROOT / "docker" / "images" / "registry.sh"
TARGET_WARM_RATIO = 1.5  # warm p50 / no-image p50
# (rate per second, tasks of the no-image and warm phases, tasks of the cold phase)
RATES = ((5.0, 100, 40), (20.0, 200, 80))
COLD_TIMEOUT_S = 300
BIG_MB = 100
BIG_SEED = 20240101
BIG_RECIPE = f"v1-{BIG_SEED}-{BIG_MB}mb"
PULL_REPEATS = 3
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"
EPOCH = "2024-01-01T00:00:00Z"


# -- the registry ----------------------------------------------------------------------------


def start_registry() -> str:
    """The project's registry started (idempotent); its host:port."""
    done = subprocess.run(
        ["bash", str(REGISTRY_SH), "start"], capture_output=True, text=True, timeout=900
    )
    for line in done.stdout.splitlines():
        if done.returncode == 0 and line.startswith("export SWITCHYARD_TEST_REGISTRY="):
            return line.partition("=")[2].strip()
    raise RuntimeError(f"{REGISTRY_SH} start failed:\n{(done.stdout + done.stderr)[-2000:]}")


class Registry:
    """A registry's HTTP API (plain HTTP on the loopback), enough to push an OCI image."""

    def __init__(self, address: str) -> None:
        self.address = address
        host, _, port = address.partition(":")
        self.conn = HTTPConnection(host, int(port or 80), timeout=120)

    def _call(self, method: str, path: str, body: bytes | None = None, **headers: str):
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        return resp.status, resp, resp.read()

    def manifest(self, repo: str, ref: str) -> bytes | None:
        accept = f"{MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"
        status, _, data = self._call("GET", f"/v2/{repo}/manifests/{ref}", Accept=accept)
        return data if status == 200 else None

    def blob(self, repo: str, digest: str) -> bytes:
        status, _, data = self._call("GET", f"/v2/{repo}/blobs/{digest}")
        if status != 200:
            raise RuntimeError(f"GET blob {repo}@{digest}: {status}")
        return data

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self._call("HEAD", f"/v2/{repo}/blobs/{digest}")[0] == 200:
            return digest
        status, resp, _ = self._call("POST", f"/v2/{repo}/blobs/uploads/", b"")
        if status != 202:
            raise RuntimeError(f"POST upload {repo}: {status}")
        where = urlsplit(resp.getheader("Location", ""))
        path = f"{where.path}?{where.query}&" if where.query else f"{where.path}?"
        status, _, body = self._call(
            "PUT", f"{path}digest={digest}", data, **{"Content-Type": "application/octet-stream"}
        )
        if status != 201:
            raise RuntimeError(f"PUT blob {repo}@{digest}: {status} {body[:200]!r}")
        return digest

    def put_image(self, repo: str, tag: str, config: dict, layers: list[tuple[bytes, bytes]]):
        """Push an image of `config` (its rootfs and history replaced) and `layers` (gzip,
        tar) as repo:tag; the manifest's digest."""
        config = {
            **config,
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest() for _, raw in layers],
            },
            "history": [{"created": EPOCH, "created_by": "bench/bench_images.py"}] * len(layers),
        }
        config_bytes = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": CONFIG,
                "digest": self.put_blob(repo, config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {"mediaType": LAYER, "digest": self.put_blob(repo, gz), "size": len(gz)}
                for gz, _ in layers
            ],
        }
        data = json.dumps(manifest, sort_keys=True).encode()
        status, _, body = self._call(
            "PUT", f"/v2/{repo}/manifests/{tag}", data, **{"Content-Type": MANIFEST}
        )
        if status != 201:
            raise RuntimeError(f"PUT manifest {repo}:{tag}: {status} {body[:300]!r}")
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def close(self) -> None:
        self.conn.close()


def _base(reg: Registry) -> tuple[dict, bytes, bytes]:
    """switchyard/base:1's config, its one layer (gzip) and that layer's tar."""
    raw = reg.manifest("switchyard/base", "1")
    if raw is None:
        raise RuntimeError(f"{reg.address} has no switchyard/base:1 (registry.sh start)")
    manifest = json.loads(raw)
    (layer,) = manifest["layers"]
    config = json.loads(reg.blob("switchyard/base", manifest["config"]["digest"]))
    gz = reg.blob("switchyard/base", layer["digest"])
    return config, gz, gzip.decompress(gz)


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(path: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    return info, data


def push_marked(reg: Registry, base: tuple[dict, bytes, bytes], tags: list[str]) -> None:
    """`bench/image:<tag>` for each tag the registry lacks: the base tree and a marker file
    naming the tag, in one layer of its own."""
    config, _, base_tar = base
    with tarfile.open(fileobj=io.BytesIO(base_tar)) as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src]  # type: ignore[union-attr]
    for tag in tags:
        if reg.manifest("bench/image", tag) is not None:
            continue
        raw = _tar([*members, _file("etc/switchyard/bench", f"{tag}\n".encode())])
        reg.put_image("bench/image", tag, config, [(gzip.compress(raw, mtime=0), raw)])


def push_big(reg: Registry, base: tuple[dict, bytes, bytes]) -> tuple[str, str, int]:
    """`bench/big:<recipe>` (pushed if the registry lacks it): its digest, its big layer's
    digest and that layer's size."""
    if reg.manifest("bench/big", BIG_RECIPE) is None:
        config, base_gz, base_tar = base
        data = random.Random(BIG_SEED).randbytes(BIG_MB * 1_000_000)
        raw = _tar([_file("bench/random.bin", data)])
        del data
        reg.put_image(
            "bench/big",
            BIG_RECIPE,
            config,
            [(base_gz, base_tar), (gzip.compress(raw, 6, mtime=0), raw)],
        )
    manifest_bytes = reg.manifest("bench/big", BIG_RECIPE)
    assert manifest_bytes is not None
    big = json.loads(manifest_bytes)["layers"][-1]
    return "sha256:" + hashlib.sha256(manifest_bytes).hexdigest(), big["digest"], big["size"]


# -- latency ---------------------------------------------------------------------------------


def _allow_bench_images(env: dict[str, str]) -> None:
    """The catalogue entry a site would add: bench/image, any tag, for agent tasks."""
    code = (
        "from django.conf import settings\n"
        "from scheduling.models import CatalogueImage, ImageRegistry\n"
        "r = ImageRegistry.objects.get(host=settings.SWITCHYARD_IMAGE_REGISTRY)\n"
        "CatalogueImage.objects.create(registry=r, repository='bench/image', tags=[],"
        " family='sandbox-base', task_types=['agent'])\n"
    )
    c.manage(env, "shell", "-c", code)


def _image(name: str) -> bench_latency.Extra:
    return lambda i: {"image": name}


def _cold(first: int) -> bench_latency.Extra:
    return lambda i: {"image": f"bench/image:cold-{first + i}"}


def latency(address: str) -> dict[str, Any]:
    phases: list[tuple] = [("prime", 1, 1.0, {"extra": _image("bench/image:warm")})]
    cold = 0
    for rate, n, n_cold in RATES:
        r = f"{rate:g}/s"
        phases += [
            (f"none {r}", n, rate),
            (f"warm {r}", n, rate, {"extra": _image("bench/image:warm")}),
            (f"cold {r}", n_cold, rate, {"extra": _cold(cold), "timeout": COLD_TIMEOUT_S}),
        ]
        cold += n_cold
    out = bench_latency._run_stack(
        phases,
        bench_latency.POLL_MS,
        keep=False,
        env_extra={"SWITCHYARD_IMAGE_REGISTRIES": address, "SWITCHYARD_IMAGE_REGISTRY": address},
        setup=_allow_bench_images,
    )
    out["phases"].pop("prime")
    for name, phase in out["phases"].items():  # an image phase's tasks all ran an image
        want = 0 if name.startswith("none") else phase["n_tasks"]
        assert phase["with_image_digest"] == want, (name, phase["with_image_digest"], want)
    ratios = {}
    for rate, _, _ in RATES:
        r = f"{rate:g}/s"
        none, warm, cold_ = (out["phases"][f"{k} {r}"] for k in ("none", "warm", "cold"))
        ratios[r] = {
            metric: {
                "warm": round(warm[metric]["p50_ms"] / none[metric]["p50_ms"], 2),
                "cold": round(cold_[metric]["p50_ms"] / none[metric]["p50_ms"], 2),
            }
            for metric in ("started", "shown_running", "post_latency")
        }
    out["p50_ratio_to_none"] = ratios
    return out


# -- throughput ------------------------------------------------------------------------------


def _timed(argv: list[str]) -> float:
    t = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, timeout=900)
    return time.monotonic() - t


def _tree_bytes(root: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(root) for f in files)


def _remove(folder: Path) -> None:
    """rmtree of a folder holding a sealed (read-only) root file system."""
    for d, _, _ in os.walk(folder):
        with contextlib.suppress(OSError):
            os.chmod(d, 0o700)
    shutil.rmtree(folder, ignore_errors=True)


def throughput(address: str, digest: str, big_layer: str) -> dict[str, Any]:
    ref = parse_image_ref(f"bench/big:{BIG_RECIPE}", default_registry=address).with_digest(digest)
    url = f"http://{address}/v2/bench/big/blobs/{big_layer}"
    runs = []
    for repeat in range(PULL_REPEATS):
        folder = c.fresh_var_dir("images-pull")
        try:
            blob, untar = folder / "layer.tar.gz", folder / "untar"
            untar.mkdir()
            run: dict[str, Any] = {}

            def floors(run=run, blob=blob, untar=untar) -> None:
                run["curl_s"] = _timed(["curl", "-fsS", "-o", str(blob), url])
                run["tar_s"] = _timed(["tar", "-xzf", str(blob), "-C", str(untar)])

            if repeat % 2 == 0:  # the order alternates: neither always runs on a warm disk
                floors()
            cache = ImageCache(
                folder / "cache",
                max_unpacked_bytes=8192 << 20,
                max_pull_bytes=8192 << 20,
                skopeo=Skopeo(timeout_s=900),
                unpack_timeout_s=900,
            )
            t = time.monotonic()
            image = cache.pull(ref)
            run["total_s"] = time.monotonic() - t
            if repeat % 2 == 1:
                floors()
            record = json.loads((image.rootfs.parent / "image.json").read_text())
            run["pull_s"], run["unpack_s"] = record["pull_seconds"], record["unpack_seconds"]
            layout = cache.layouts / digest.partition(":")[2]
            run["umoci_s"] = _timed(
                ["umoci", "raw", "unpack", "--rootless", "--image", f"{layout}:image"]
                + [str(folder / "umoci")]
            )
            run.update(
                image_bytes=image.image_bytes,
                rootfs_bytes=image.rootfs_bytes,
                layer_bytes=blob.stat().st_size,
                untar_bytes=_tree_bytes(untar),
            )
            runs.append(run)
        finally:
            _remove(folder)
    med = {k: c.median([r[k] for r in runs]) for k in runs[0]}
    mb = 1e6
    return {
        "image_mb": round(med["image_bytes"] / mb, 1),
        "rootfs_mb": round(med["rootfs_bytes"] / mb, 1),
        "repeats": PULL_REPEATS,
        "pull_s": round(med["pull_s"], 2),
        "unpack_s": round(med["unpack_s"], 2),
        "total_s": round(med["total_s"], 2),
        "umoci_alone_s": round(med["umoci_s"], 2),
        "floor_curl_s": round(med["curl_s"], 2),
        "floor_tar_s": round(med["tar_s"], 2),
        "pull_mb_per_s": round(med["image_bytes"] / mb / med["pull_s"], 1),
        "unpack_mb_per_s": round(med["rootfs_bytes"] / mb / med["unpack_s"], 1),
        "floor_curl_mb_per_s": round(med["layer_bytes"] / mb / med["curl_s"], 1),
        "floor_tar_mb_per_s": round(med["untar_bytes"] / mb / med["tar_s"], 1),
        "pull_ratio_to_floor": round(med["pull_s"] / med["curl_s"], 2),
        "unpack_ratio_to_floor": round(med["unpack_s"] / med["tar_s"], 2),
        "runs": [
            {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs
        ],
    }


def run() -> dict[str, Any]:
    address = start_registry()
    reg = Registry(address)
    try:
        t = time.monotonic()
        base = _base(reg)
        push_marked(reg, base, ["warm"] + [f"cold-{i}" for i in range(sum(r[2] for r in RATES))])
        digest, big_layer, _ = push_big(reg, base)
        pushed_s = time.monotonic() - t
    finally:
        reg.close()
    return {
        "bench": "images",
        "registry": address,
        "images_ready_s": round(pushed_s, 1),
        "target_warm_ratio": TARGET_WARM_RATIO,
        "latency": latency(address),
        "throughput": throughput(address, digest, big_layer),
    }


# -- docs/benchmarks.md ----------------------------------------------------------------------


def summary_rows(res: dict[str, Any]) -> list[str]:
    rows = []
    phases, ratios = res["latency"]["phases"], res["latency"]["p50_ratio_to_none"]
    for rate, n, n_cold in RATES:
        r = f"{rate:g}/s"
        for metric, label in (("started", "process started"), ("shown_running", "shown")):
            none = phases[f"none {r}"][metric]["p50_ms"]
            warm = phases[f"warm {r}"][metric]["p50_ms"]
            cold = phases[f"cold {r}"][metric]["p50_ms"]
            ratio = ratios[r][metric]["warm"]
            rows.append(
                f"| agent submit → running p50 in a cached image, {label} ({n} tasks at {r}; "
                f"no image {none} ms, same run) | {warm} ms = **{ratio}×** no image "
                f"| ≤ {TARGET_WARM_RATIO}× | {'**yes**' if ratio <= TARGET_WARM_RATIO else '**no**'} |"
            )
            rows.append(
                f"| the same, image not cached ({n_cold} tasks at {r}, each its own 1 MB image) "
                f"| {cold} ms = {ratios[r][metric]['cold']}× | — | — |"
            )
    t = res["throughput"]
    rows.append(
        f"| pull of a {t['image_mb']} MB image (skopeo copy) | {t['pull_mb_per_s']} MB/s = "
        f"{t['pull_ratio_to_floor']}× the time of `curl` ({t['floor_curl_mb_per_s']} MB/s) | — | — |"
    )
    rows.append(
        f"| unpack of it ({t['rootfs_mb']} MB, umoci) | {t['unpack_mb_per_s']} MB/s = "
        f"{t['unpack_ratio_to_floor']}× the time of `tar -xzf` ({t['floor_tar_mb_per_s']} MB/s) "
        "| — | — |"
    )
    return rows


def section(res: dict[str, Any]) -> list[str]:
    lat, t = res["latency"], res["throughput"]
    lines = [
        "## Tasks in images",
        "",
        f"`bench_images.run()` (docs/containers.md), against the project's registry on "
        f"{res['registry']} (`docker/images/registry.sh start`; the bench's images pushed or "
        f"found there in {res['images_ready_s']} s). Latency: bench_latency's stack and tasks "
        "(`sleep 0.1`, agent type), with the portal allowed that registry and its catalogue "
        "listing `bench/image` for agent tasks; at each rate three phases on the one stack: "
        "`none` (no image: the floor, same run), `warm` (every task names `bench/image:warm`, "
        "which one task pulled before the first phase), `cold` (every task names its own "
        "`bench/image:cold-<i>`, a 1 MB busybox image sharing no blob with any other: the "
        "submission asks the registry what the tag names, the backend pulls and unpacks it "
        "before the job starts). Latencies in ms from `submitted_at` (the POST, which includes "
        "asking the registry, is its own row).",
        "",
        "| phase | tasks | rate asked → sent | measure | p50 | p90 | p99 | max | p50 ÷ none |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in lat["phases"].items():
        rate = name.split()[1]
        kind = name.split()[0]
        sent = f"{p['submit_rate_target_per_s']}/s → {p['submit_rate_per_s']}/s"
        for metric, label in (
            ("started", "`started_at` (process started)"),
            ("shown_running", "first `running`-or-later event"),
            ("post_latency", "HTTP POST answered"),
        ):
            s = p[metric]
            ratio = "—" if kind == "none" else f"{lat['p50_ratio_to_none'][rate][metric][kind]}×"
            lines.append(
                f"| {name} | {p['n_tasks']} | {sent} | {label} | {s['p50_ms']} | {s['p90_ms']} "
                f"| {s['p99_ms']} | {s['max_ms']} | {ratio} |"
            )
    lines += [
        "",
        f"Every task succeeded; every image phase's task was stored with its digest. Job "
        f"processes left after the run: {lat['job_processes_left']}.",
        "",
        f"Throughput: `ImageCache.pull` of `bench/big` ({t['image_mb']} MB compressed, "
        f"{t['rootfs_mb']} MB unpacked; a layer of 100 MB of seeded random bytes on the base) by "
        f"digest into a fresh cache on the same disk, {t['repeats']} repeats, medians; the "
        "floors ran in the same repeats (order alternating).",
        "",
        "| step | seconds | MB/s | floor | floor seconds | floor MB/s | ratio |",
        "|---|---|---|---|---|---|---|",
        f"| pull (skopeo copy by digest, manifest checked first) | {t['pull_s']} "
        f"| {t['pull_mb_per_s']} | `curl` of the layer to a file | {t['floor_curl_s']} "
        f"| {t['floor_curl_mb_per_s']} | {t['pull_ratio_to_floor']}× |",
        f"| unpack (layers measured, `umoci raw unpack --rootless`, sealed) | {t['unpack_s']} "
        f"| {t['unpack_mb_per_s']} | `tar -xzf` of that file | {t['floor_tar_s']} "
        f"| {t['floor_tar_mb_per_s']} | {t['unpack_ratio_to_floor']}× |",
        f"| of which `umoci raw unpack` alone (run again on the pulled layout) "
        f"| {t['umoci_alone_s']} | — | — | — | — | — |",
        f"| whole `pull()` | {t['total_s']} | — | — | — | — | — |",
    ]
    return lines


if __name__ == "__main__":
    print(json.dumps(run()))
