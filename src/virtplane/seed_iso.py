"""A NoCloud seed image: an ISO 9660 volume labelled ``cidata`` holding the seed's files.

Built in memory with pycdlib (Joliet and Rock Ridge names, so the guest sees
``meta-data`` rather than ``META_DAT.;1``).
"""

from __future__ import annotations

import io

from pycdlib.pycdlib import PyCdlib

LABEL = "cidata"


def _iso9660_name(name: str) -> str:
    """An ISO 9660 level-1-safe alias of a file name (the long name lives in Joliet / Rock Ridge)."""
    stem = "".join(c for c in name.upper() if c.isalnum())[:8]
    return f"/{stem}.;1"


def build_seed_iso(documents: dict[str, bytes]) -> bytes:
    iso = PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=LABEL)
    for name, data in sorted(documents.items()):
        iso.add_fp(
            io.BytesIO(data),
            len(data),
            _iso9660_name(name),
            rr_name=name,
            joliet_path=f"/{name}",
        )
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


def read_seed_iso(image: bytes) -> tuple[str, dict[str, bytes]]:
    """The volume label and the files (by their Joliet names) of a seed image."""
    iso = PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        files: dict[str, bytes] = {}
        for path, _dirs, names in iso.walk(joliet_path="/"):
            for name in names:
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, joliet_path=f"{path.rstrip('/')}/{name}")
                files[name] = out.getvalue()
        return label, files
    finally:
        iso.close()
