"""Process and XLA plumbing below every layer: huge pages and malloc settings for XLA's CPU buffers,
the persistent compilation cache, XLA compile options, tracing with jax.numpy's helpers inlined, and
the file modes of atomically written files.

The process-wide actions (:func:`hugepages.reexec_with_hugepages`, :func:`hugepages.keep_freed_blocks`,
:func:`compile_cache.use_compile_cache`) are taken by the command-line tools (and the compile cache by a
notebook that asks for it), never by importing the library. This package imports nothing from the rest
of jaxmd_dp but :mod:`jaxmd_dp.errors`.
"""
