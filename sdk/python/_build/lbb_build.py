"""A PEP 517 build backend for the lbb SDK that needs nothing but the standard library.

pip builds in an isolated environment and downloads the backend's requirements into it; with
PyPI out of reach (as on the hosts lbb runs on) that fails for setuptools or any other backend.
This one has no requirements, so `pip install ./sdk/python` works offline. It builds a pure
Python wheel of src/lbb, an sdist, and an editable wheel (PEP 660) whose .pth points at src/.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
PACKAGE = "lbb"


def _project() -> Dict[str, Any]:
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return _project_fallback(path)
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]


def _project_fallback(path: str) -> Dict[str, Any]:
    """Reads the few flat keys of [project] this file uses, for Pythons without tomllib."""
    out: Dict[str, Any] = {}
    section = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                section = line.strip("[]").strip()
                continue
            if section != "project" or "=" not in line:
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            if value.startswith("["):
                out[key] = re.findall(r'"([^"]*)"', value)
            elif value.startswith('"'):
                out[key] = value.strip('"')
    return out


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
    ]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for dep in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    body = ""
    readme = os.path.join(ROOT, "README.md")
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _names() -> Tuple[str, str]:
    p = _project()
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def _dist_info() -> str:
    name, version = _names()
    return f"{name}-{version}.dist-info"


def _wheel_meta() -> str:
    return "Wheel-Version: 1.0\nGenerator: lbb_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files() -> List[Tuple[str, str]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(SRC, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            out.append((full, os.path.relpath(full, SRC).replace(os.sep, "/")))
    return out


class _Wheel:
    def __init__(self, path: str) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: List[str] = []

    def add(self, arcname: str, data: bytes) -> None:
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, dist_info: str) -> None:
        record = f"{dist_info}/RECORD"
        self.records.append(f"{record},,")
        self.zip.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(self.records) + "\n")
        self.zip.close()


def _write_wheel(wheel_directory: str, files: List[Tuple[str, bytes]]) -> str:
    name, version = _names()
    filename = f"{name}-{version}-py3-none-any.whl"
    dist_info = _dist_info()
    w = _Wheel(os.path.join(wheel_directory, filename))
    for arcname, data in files:
        w.add(arcname, data)
    w.add(f"{dist_info}/METADATA", _metadata().encode())
    w.add(f"{dist_info}/WHEEL", _wheel_meta().encode())
    w.add(f"{dist_info}/top_level.txt", (PACKAGE + "\n").encode())
    w.close(dist_info)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    dist_info = _dist_info()
    d = os.path.join(metadata_directory, dist_info)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_meta())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    files = []
    for full, arcname in _package_files():
        with open(full, "rb") as f:
            files.append((arcname, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", (SRC + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _names()
    base = f"{name}-{version}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(rel: str) -> None:
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                tar.add(full, arcname=f"{base}/{rel}", filter=_clean)
        for rel in ("pyproject.toml", "README.md", "_build/lbb_build.py", "src", "tests"):
            add(rel)
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))
    return filename


def _clean(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
    if "__pycache__" in info.name or info.name.endswith(".pyc"):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
