"""Unpack a source distribution (.tar.gz or .zip) into a folder, refusing any member that would
land outside it (an absolute path, "..", a link that points out): what build_extras.sh builds.
Usage: python unpack_sdist.py ARCHIVE FOLDER"""

import os
import sys
import tarfile
import zipfile


def inside(folder: str, name: str) -> bool:
    target = os.path.realpath(os.path.join(folder, name))
    return target == folder or target.startswith(folder + os.sep)


def main(archive: str, folder: str) -> int:
    folder = os.path.realpath(folder)
    os.makedirs(folder, exist_ok=True)
    if archive.endswith(".zip"):
        with zipfile.ZipFile(archive) as opened:
            bad = [name for name in opened.namelist() if not inside(folder, name)]
            if not bad:
                opened.extractall(folder)
    else:
        with tarfile.open(archive) as opened:
            members = opened.getmembers()
            bad = [m.name for m in members if not inside(folder, m.name) or not (m.isfile() or m.isdir())
                   and not (m.issym() and inside(folder, os.path.join(os.path.dirname(m.name), m.linkname)))]
            if not bad:
                opened.extractall(folder, members=[m for m in members if m.isfile() or m.isdir() or m.issym()])
    if bad:
        print(f"torchbake: {archive} holds members outside its folder or of another kind: {', '.join(bad[:5])};"
              " it is not unpacked", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
