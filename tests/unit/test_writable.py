"""Report files on pseudo file systems are refused by the file system's type, not by the path:
/dev is devtmpfs, but the tmpfs at /dev/shm holds ordinary files (scripts/test.sh puts the suite's
folders there where the machine has room)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchbake.configuration.writable import check_output_file, pseudo_mount
from torchbake.core.errors import ConfigurationError

TABLE = """\
/dev/vda1 / ext4 rw,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
devtmpfs /dev devtmpfs rw,nosuid,size=4096k,mode=755 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
devpts /dev/pts devpts rw,nosuid,noexec 0 0
proc /mnt/odd\\040name proc rw 0 0
tmpfs /mnt/odd\\040name/inner tmpfs rw 0 0
"""


@pytest.mark.parametrize(("path", "pseudo"), [
    ("/proc/r.json", "/proc"), ("/sys/kernel/r.json", "/sys"), ("/dev/r.json", "/dev"), ("/dev/pts/r.json", "/dev/pts"),
    ("/dev", "/dev"), ("/dev/shm/r.json", None), ("/dev/shm/deep/er/r.json", None), ("/devices/r.json", None),
    ("/tmp/r.json", None), ("/mnt/odd name/r.json", "/mnt/odd name"), ("/mnt/odd name/inner/r.json", None),
])
def test_the_deepest_mount_above_a_path_says_whether_it_holds_files(tmp_path, path, pseudo):
    mounts = tmp_path / "mounts"
    mounts.write_text(TABLE)
    assert pseudo_mount(Path(path), mounts) == (Path(pseudo) if pseudo else None)


def test_without_a_mount_table_proc_sys_and_dev_are_refused_by_their_paths(tmp_path):
    missing = tmp_path / "no-mounts"
    assert [pseudo_mount(Path(p), missing) for p in ("/proc/r", "/sys/r", "/dev/shm/r", "/tmp/r")] == \
        [Path("/proc"), Path("/sys"), Path("/dev"), None]


def test_a_report_in_dev_is_refused_and_one_in_dev_shm_is_written_there(tmp_path):
    with pytest.raises(ConfigurationError, match=r"^--report /dev/r\.json: /dev holds no ordinary files; name a file"
                                                 r" in a folder you can write, e\.g\. --report reports/r\.json\.$"):
        check_output_file("/dev/r.json", "--report")
    (tmp_path / "link").symlink_to("/proc")
    for where in ("/dev/shm/../r.json", str(tmp_path / "link" / "r.json")):  # where the path leads, not how it reads
        with pytest.raises(ConfigurationError, match=r" holds no ordinary files; "):
            check_output_file(where, "--report")
    if not Path("/dev/shm").is_dir() or pseudo_mount(Path("/dev/shm")) is not None:
        pytest.fail("this machine has no tmpfs at /dev/shm to write a report in")
    target = Path("/dev/shm") / f"torchbake-writable-test-{id(TABLE)}" / "r.json"
    try:
        assert check_output_file(str(target), "--report") == target
    finally:
        if target.parent.exists():
            target.parent.rmdir()


def test_the_mount_table_is_read_once_for_all_its_readers_escapes_decoded(tmp_path):
    """torchbake.core.files.mount_table: what pseudo_mount and the bootstrap's mounts_below read (a
    tab and a backslash in a mount point decoded like a space; a line too short skipped)."""
    from torchbake.core.files import mount_table
    from torchbake.inputs.base_os import mounts_below

    mounts = tmp_path / "mounts"
    mounts.write_text(TABLE + "tmpfs /mnt/a\\011tab\\134slash tmpfs rw 0 0\nbroken-line\n")
    table = mount_table(mounts)
    assert table[-1] == (Path("/mnt/a\ttab\\slash"), "tmpfs") and len(table) == len(TABLE.splitlines()) + 1
    assert mount_table(tmp_path / "no-mounts") is None
    assert mounts_below(Path("/proc"))[-1] == "/proc"  # the real table: /proc itself last, deepest first
