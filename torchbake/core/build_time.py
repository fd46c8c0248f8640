"""The one time a build writes into its image: ``SOURCE_DATE_EPOCH``, never the moment of the build.

Every build gets it as a build arg: BuildKit writes it as the config's and history's times, the
release steps (docker/common/step.sh) as every file's modification time, and CPython, seeing it,
writes hash-based .pyc files. Two engines given the same inputs so make the same image digest.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

from torchbake.core.errors import ConfigurationError

LATEST_SOURCE_DATE_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: the last time an image's date can say
DEFAULT_SOURCE_DATE_EPOCH = 0  # 1970-01-01, as ko and rules_oci: the same inputs, the same digest, anywhere


def source_date_epoch() -> int:
    """The time every build writes into its image (the config's and history's times, the files'
    modification times, hash-based .pyc files): ``SOURCE_DATE_EPOCH`` (reproducible builds'
    convention) when set, checked, else :data:`DEFAULT_SOURCE_DATE_EPOCH`. Never the moment of the
    build, so that two engines given the same inputs make the same image."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return DEFAULT_SOURCE_DATE_EPOCH
    if not re.fullmatch(r"[0-9]{1,12}", value) or int(value) > LATEST_SOURCE_DATE_EPOCH:
        raise ConfigurationError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds since 1970-01-01 UTC"
                                 f" from 0 to {LATEST_SOURCE_DATE_EPOCH} (9999-12-31); set it to a whole number of"
                                 " seconds, e.g. 1700000000 (the time of the sources' last commit), or unset it.")
    return int(value)


def created_time() -> str:
    """The image's ``org.opencontainers.image.created``: SOURCE_DATE_EPOCH's time when it is set,
    else "" (no label: the image holds no moment of its build, and 1970 would be no answer)."""
    if not os.environ.get("SOURCE_DATE_EPOCH"):
        return ""
    return datetime.fromtimestamp(source_date_epoch(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
