"""How torchbake talks to the network, whatever it fetches (wheels and tarballs: torchbake.inputs.downloads;
manifests and blobs: torchbake.adapters.registry): how hard to try and whom to trust, ``[downloads]`` in
the configuration."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from torchbake.core.errors import DownloadError


@dataclass(frozen=True, kw_only=True)
class DownloadPolicy:
    """How hard to try, and whom to trust (``[downloads]`` in the config)."""

    retries: int = 4  # tries after the first
    retry_max_time: float = 300.0  # seconds, all tries together
    retry_backoff: float = 1.0  # first wait; doubled each time, at most 30 s
    timeout: float = 60.0  # seconds without progress on one connection
    require_hashes: bool = False
    ca_bundle: str = ""  # PEM file of extra CAs to trust (an intercepting proxy's)

    @classmethod
    def from_settings(cls, options) -> DownloadPolicy:
        return cls(retries=options.retries, retry_max_time=float(options.retry_max_time),
                   retry_backoff=float(options.retry_backoff), timeout=float(options.timeout),
                   require_hashes=options.require_hashes, ca_bundle=options.ca_bundle)

    def ssl_context(self) -> ssl.SSLContext:
        """The system's CAs, plus the bundle's; verification always on."""
        context = ssl.create_default_context()
        if self.ca_bundle:
            try:
                context.load_verify_locations(cafile=str(Path(self.ca_bundle).expanduser()))
            except (OSError, ssl.SSLError) as exc:
                raise DownloadError(f"downloads.ca_bundle {self.ca_bundle}: not a readable PEM CA bundle ({exc}).") from None
        return context
