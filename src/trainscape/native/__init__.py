"""Building and loading the native kernels, for the LLM and the DLRM models alike.

- :mod:`.build_llm`, :mod:`.build_dlrm`: cffi builders (API mode) of the C ports in ``csrc/``
  (``setup.py`` runs them; each also builds in place when run as a script). The headers are
  fed to cffi as they are, so the C declarations exist once.
- :mod:`.llm`, :mod:`.dlrm`: the compiled extensions (``_llm``, ``_dlrm``) wrapped for NumPy:
  layout checks at load, argument checks before every call.
- :mod:`.sweep`: the C exhaustive-sweep kernel (``ts_sweep_range``, part of ``_llm``).
- :mod:`.dlrm_header`: generates ``csrc/dlrm.h`` from the DLRM layout.
- :mod:`.numba_cache`: the numba JIT's on-disk cache, keyed on the model's source text so a
  changed model never runs stale machine code.

Which backend runs is chosen in :mod:`trainscape.backends`. Importing this package imports
nothing heavy; each module loads its extension on first import.
"""
