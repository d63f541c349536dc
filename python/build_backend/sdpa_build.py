"""The PEP 517 backend of the sdpa package: a wheel of python/sdpa/*.py and
its metadata, made with the standard library alone, so that
`pip install ./python` needs nothing from a package index.

The version is the one sdpa/_abi.py was written for (HEADER_VERSION_NUMBER,
which ctest python_pytest checks against include/sdpa.h)."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "sdpa"
SUMMARY = "libsdpa's exact scaled dot-product attention from numpy and PyTorch"


def _version():
    with open(os.path.join(HERE, "sdpa", "_abi.py")) as f:
        number = int(re.search(r"^HEADER_VERSION_NUMBER = (\d+)$", f.read(), re.M).group(1))
    return "%d.%d.%d" % (number // 10000, number // 100 % 100, number % 100)


def _metadata():
    with open(os.path.join(HERE, "README.md")) as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\nVersion: %s\nSummary: %s\nLicense: MIT\n"
        "Requires-Python: >=3.7\nRequires-Dist: numpy\n"
        "Description-Content-Type: text/markdown\n\n%s" % (NAME, _version(), SUMMARY, readme)
    )


def _package_files():
    folder = os.path.join(HERE, "sdpa")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and name != "_install.py":
            yield "sdpa/" + name, os.path.join(folder, name)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = "%s-%s.dist-info" % (NAME, version)
    filename = "%s-%s-py3-none-any.whl" % (NAME, version)
    entries = []
    for arcname, path in _package_files():
        with open(path, "rb") as f:
            entries.append((arcname, f.read()))
    entries.append((dist_info + "/METADATA", _metadata().encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: sdpa_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries.append((dist_info + "/WHEEL", wheel.encode()))
    record = [_record_line(a, d) for a, d in entries] + [dist_info + "/RECORD,,"]
    entries.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            z.writestr(arcname, data)
    return filename


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "build_backend/sdpa_build.py"] + [a for a, _ in _package_files()]:
            t.add(os.path.join(HERE, rel), arcname=base + "/" + rel)
        info = _metadata().encode()
        member = tarfile.TarInfo(base + "/PKG-INFO")
        member.size = len(info)
        t.addfile(member, io.BytesIO(info))
    return filename
