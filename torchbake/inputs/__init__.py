"""Everything a build reads, fetched and staged before it starts: checked downloads (``downloads``),
wheels resolved on the host for the image's Python and platform (``wheelhouse``), source trees at
pinned tags (``sources``), the build context (``context``), and the FROM image itself when it has
to be made (``base_os``, written as an OCI archive by ``image_archive``).

May use: ``torchbake.adapters`` and the layers below it.
"""
