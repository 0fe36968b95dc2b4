"""Embedding trainscape in a scheduler: pack files for the C library and the "best layout for
this allocation" query (:func:`best_for_allocation`). See docs/embedding.md."""

from .best import BestLayout, best_for_allocation
from .packfile import PackFile, read_pack, write_pack
from .space_vector import space_vector

__all__ = ["BestLayout", "PackFile", "best_for_allocation", "read_pack", "space_vector",
           "write_pack"]
