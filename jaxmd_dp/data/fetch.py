"""The example water data of DeePMD-kit (``examples/water/data``), fetched on demand for users.

``ensure_water_data(dest)`` returns ``dest`` when it already holds data_0..data_3 with the right
checksums; otherwise it downloads every file from a pinned DeePMD-kit commit (or from the mirror named
by ``JAXMD_DP_DATA_MIRROR``: a local directory or a URL prefix holding ``water/data_0`` ...) into a
temporary directory, checks each file's sha256, and only then renames the systems into place, so
``dest`` never holds a half-written system. urllib only; any failure raises InputError saying how to
get the data.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from jaxmd_dp.errors import InputError

MIRROR_ENV = "JAXMD_DP_DATA_MIRROR"
# deepmodeling/deepmd-kit commit "update the doc and examples" (2021-04-20), reachable from master
# and devel; examples/water/data there is byte-identical to the current devel head.
WATER_COMMIT = "1a7010505957c453a8bae299ae549ebf9a65b7f4"
WATER_URL = f"https://raw.githubusercontent.com/deepmodeling/deepmd-kit/{WATER_COMMIT}/examples/water/data"
WATER_SYSTEMS = ("data_0", "data_1", "data_2", "data_3")
# sha256 of every file, path relative to the water/ directory: DeePMD-kit's published bytes.
WATER_FILES: dict[str, str] = {
    "data_0/set.000/box.npy": "88376dc931e272a3569cabcab0f1ee4320168c73ee183ae60f7086b473fc719d",
    "data_0/set.000/coord.npy": "58554d0ef240b54a242a8163e112d673872f5be5198c86c4eb8d5f39602ff645",
    "data_0/set.000/energy.npy": "920c4628018c12a4d38c22aef7f41ca483a02747319a42dd4e4f703e2a9f70c8",
    "data_0/set.000/force.npy": "fae9be94125902c089720416a4cea521380a415709ead1f9134b7f64f46f1e58",
    "data_0/type.raw": "c0287bfae960bdddafa96841b59c29ac9b7548ddac0b5bebd30fb502563d0507",
    "data_0/type_map.raw": "2af2202bdb95741681b308b05c1dae7837141fe32b10d14db2a4c0ea9103e55b",
    "data_1/set.000/box.npy": "88376dc931e272a3569cabcab0f1ee4320168c73ee183ae60f7086b473fc719d",
    "data_1/set.000/coord.npy": "b9cf07c179a0f975a3b8607f439602e9a78b9bec3b02aa8afe812d716563f380",
    "data_1/set.000/energy.npy": "d3b407e3b67f953fe496a62e1f7dc84d07a8bfcfb748bfaafbca435809012b93",
    "data_1/set.000/force.npy": "7a3099c380a57379574e5b854f43589e736b785d6f747c68d093a45b3f85b542",
    "data_1/set.001/box.npy": "88376dc931e272a3569cabcab0f1ee4320168c73ee183ae60f7086b473fc719d",
    "data_1/set.001/coord.npy": "f4581f0f4aedb910b8580157a9dca622c5cd3b71428f5924bdeed0192ab50dd2",
    "data_1/set.001/energy.npy": "d4634357a81940e5aca110cd5285b3b72503f4ae13bbfffbe5791c145748a4bf",
    "data_1/set.001/force.npy": "19313e524e1900eaf721ec7be9f2a48b854301aefc884f6ca4815824aa4b6a77",
    "data_1/type.raw": "c0287bfae960bdddafa96841b59c29ac9b7548ddac0b5bebd30fb502563d0507",
    "data_1/type_map.raw": "2af2202bdb95741681b308b05c1dae7837141fe32b10d14db2a4c0ea9103e55b",
    "data_2/set.000/box.npy": "88376dc931e272a3569cabcab0f1ee4320168c73ee183ae60f7086b473fc719d",
    "data_2/set.000/coord.npy": "c9fd13c05992f98efe1d78ae0b70f0565820aceeaf0d25f17b02a0f29a0b84c8",
    "data_2/set.000/energy.npy": "a38b8cd8e897ded6ac3a6d88559358c634575bede2ae930bc2557b1047059b49",
    "data_2/set.000/force.npy": "fda708ae95c73edca449709c2adfdf494acc6379323d92f865b1698c3830634f",
    "data_2/type.raw": "c0287bfae960bdddafa96841b59c29ac9b7548ddac0b5bebd30fb502563d0507",
    "data_2/type_map.raw": "2af2202bdb95741681b308b05c1dae7837141fe32b10d14db2a4c0ea9103e55b",
    "data_3/set.000/box.npy": "88376dc931e272a3569cabcab0f1ee4320168c73ee183ae60f7086b473fc719d",
    "data_3/set.000/coord.npy": "f9169bb378e0a4641c65171ccedd47d7b3ac115bc8e1ac8c72be1ce81959e793",
    "data_3/set.000/energy.npy": "8e7289bd03566f737f998e26fcdc3e838482e7bb80356939567b3a920d23f1c8",
    "data_3/set.000/force.npy": "7abe876297cd5c989289760435c2258c3ad7be94bb6ed40640efbefb55b76a68",
    "data_3/type.raw": "c0287bfae960bdddafa96841b59c29ac9b7548ddac0b5bebd30fb502563d0507",
    "data_3/type_map.raw": "2af2202bdb95741681b308b05c1dae7837141fe32b10d14db2a4c0ea9103e55b",
}
TIMEOUT_S = 60.0  # per file, seconds


def ensure_water_data(dest: str | Path = "data/water") -> str:
    """Make sure ``dest`` holds DeePMD-kit's water data_0..data_3; return ``dest`` as a string.

    Source: ``$JAXMD_DP_DATA_MIRROR`` (a directory or URL prefix containing ``water/data_0`` ...)
    when set, else :data:`WATER_URL`. Raises InputError (one line) when the data cannot be had.
    """
    dest = Path(dest)
    if water_data_complete(dest):
        return str(dest)
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-fetch-", dir=dest.parent))
    except OSError as exc:
        raise InputError(f"{dest}: cannot create the data directory ({exc.strerror or exc})") from None
    try:
        for rel, sha in WATER_FILES.items():
            src, data = _read(mirror, rel, dest)
            got = hashlib.sha256(data).hexdigest()
            if got != sha:
                raise InputError(
                    f"{src}: sha256 {got[:12]}... does not match DeePMD-kit's {sha[:12]}... "
                    f"(corrupt download or wrong {MIRROR_ENV}); {_how_to(dest)}"
                )
            out = tmp / "water" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        _install(tmp / "water", dest)
    except OSError as exc:
        raise InputError(f"{dest}: cannot write the water data ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)


def water_data_complete(dest: str | Path) -> bool:
    """True when every water file is present under ``dest`` with the published sha256."""
    dest = Path(dest)
    for rel, sha in WATER_FILES.items():
        f = dest / rel
        try:
            if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != sha:
                return False
        except OSError:
            return False
    return True


def _how_to(dest: Path) -> str:
    return (
        f"download {WATER_URL}/data_{{0,1,2,3}} into {dest}, or set {MIRROR_ENV} to a directory "
        "or URL prefix holding water/data_0..data_3"
    )


def _read(mirror: str, rel: str, dest: Path) -> tuple[str, bytes]:
    """(source name, bytes) of one water file from the mirror or the pinned GitHub URL."""
    if mirror and "://" not in mirror:
        src = Path(mirror) / "water" / rel
        if not Path(mirror).is_dir():
            raise InputError(f"{MIRROR_ENV}={mirror}: directory not found; unset it or {_how_to(dest)}")
        try:
            return str(src), src.read_bytes()
        except OSError as exc:
            raise InputError(f"{src}: cannot read ({exc.strerror or exc}); {_how_to(dest)}") from None
    url = f"{mirror.rstrip('/')}/water/{rel}" if mirror else f"{WATER_URL}/{rel}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return url, resp.read()
    except (OSError, ValueError) as exc:  # URLError/HTTPError/timeouts are OSError
        reason = getattr(exc, "reason", None) or exc
        raise InputError(f"cannot fetch {url} ({reason}); {_how_to(dest)}") from None


def _install(src: Path, dest: Path) -> None:
    """Move the verified ``src`` (holding data_0..data_3) to ``dest``, one rename per system."""
    if not dest.exists():
        try:
            os.replace(src, dest)
            return
        except OSError:
            if water_data_complete(dest):  # another process installed it meanwhile
                return
            if not dest.is_dir():
                raise
    old = src.parent / "old"
    old.mkdir(exist_ok=True)
    for name in WATER_SYSTEMS:
        if (dest / name).exists():
            os.replace(dest / name, old / name)
        os.replace(src / name, dest / name)
