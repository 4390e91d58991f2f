"""What every stage stands on: atomic files and output directories (``fsutil``), child
processes and time limits for user code (``isolate``), numpy's thread pool (``blas``).
"""
