"""What an image is made of and what it says about itself: its contents read from the image
(``inventory``), its SBOMs (``sbom``: SPDX and CycloneDX), its provenance (``provenance``), the
build manifest (``manifest``), both kept beside the image and attached in the registry
(``attestations``), and what changed between two images (``image_diff``).

May use: ``torchbake.inputs`` and the layers below it.
"""
