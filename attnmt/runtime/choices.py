"""The names the command line offers as choices, importable without torch or NumPy (keeps
``attnmt --help`` fast). Each list belongs to the module named beside it, which imports it from here."""

#: numeric precisions of training and search (see attnmt.runtime.precision)
PRECISIONS = ("fp32", "bf16", "fp16")

#: devices (see attnmt.runtime.device): auto, cpu, cuda, cuda:N or mps
DEVICES_HELP = "auto (CUDA, else MPS, else the CPU), cpu, cuda, cuda:N or mps"

#: ways of turning attention weights into links (see attnmt.alignment.links)
LINK_METHODS = ("src2tgt", "tgt2src", "intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and",
                "itermax", "match")
#: ways to make one set of links from two directional ones (``attnmt.alignment.symmetrize``)
SYMMETRIZATIONS = ("intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")

#: vector-attention scorings (see attnmt.alignment.vector_weights)
SCORINGS = ("cosine", "scaled_dot")

#: gold alignment file formats (see attnmt.alignment.aer)
GOLD_FORMATS = ("naacl", "pharaoh")

#: what guided alignment does with a target word that has no link (training.guide_unaligned;
#: see attnmt.data.link_files)
GUIDE_UNALIGNED = ("ignore", "eos")

#: what takes a switched-off attention head's place (attnmt.models.head_gates): nothing, or its mean output
HEAD_ABLATIONS = ("zero", "mean")

#: What a heatmap or a curves figure can be written as (the file name's suffix).
PLOT_FORMATS = ("png", "svg", "pdf")

# The attribution methods' names and settings are in their own registry, attnmt.attribution.methods
# (as light to import as this module).
