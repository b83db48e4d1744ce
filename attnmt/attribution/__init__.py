"""Attributions: how much each source token matters to each output token of a translation.

One registry (``attnmt.attribution.methods``) names every method, as ``attnmt.attention.registry``
names the mechanisms; each method lives in its own module with its paper and equation in the
docstring, and ``attnmt.attribution.reader.attribute`` reads any of them batch by batch. The
registry imports no torch, so the command line can list the names quickly.
"""
