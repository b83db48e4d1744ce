"""The names the alignment commands offer as choices, importable without NumPy (keeps `attnmt --help` fast)."""

#: ways of turning attention weights into links (see attnmt.alignment.links)
LINK_METHODS = ("src2tgt", "tgt2src", "intersect", "union", "grow-diag", "grow-diag-final", "itermax", "match")

#: vector-attention scorings (see attnmt.alignment.weights)
SCORINGS = ("cosine", "seed")

#: gold alignment file formats (see attnmt.alignment.metrics)
GOLD_FORMATS = ("naacl", "pharaoh")
