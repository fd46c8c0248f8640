"""invoke task collections, one module per area; the root ``tasks.py`` composes them."""
