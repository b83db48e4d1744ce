"""Each built-in single-head mechanism's equations as MathML, for the step-through of ``attnmt
serve``: the browser renders MathML itself (Chromium, Firefox and Safari do), so the page needs no
script or font from a CDN. A user's mechanism has none here: the page shows its docstring as text.

Every entry is the scores e_s, then the weights α_s, then the context c, as the mechanism computes
them at output step t with query h (the decoder state) and the encoder states h̄_s (Luong et al.,
2015; Bahdanau et al., 2015; Vaswani et al., 2017).
"""

from __future__ import annotations

__all__ = ["MATHML", "equation_mathml"]

_H, _HS = "<mi>h</mi>", "<msub><mover><mi>h</mi><mo>&#x304;</mo></mover><mi>s</mi></msub>"
_T = "<msup><mi></mi><mo>&#x22A4;</mo></msup>"
_E = "<msub><mi>e</mi><mi>s</mi></msub>"
_ALPHA = "<msub><mi>&#x3B1;</mi><mi>s</mi></msub>"
_SOFTMAX = (f"<mrow>{_ALPHA}<mo>=</mo><mfrac><mrow><mi>exp</mi><mo>(</mo>{_E}<mo>)</mo></mrow>"
            "<mrow><msub><mo>&#x2211;</mo><msup><mi>s</mi><mo>&#x2032;</mo></msup></msub><mi>exp</mi><mo>(</mo>"
            "<msub><mi>e</mi><msup><mi>s</mi><mo>&#x2032;</mo></msup></msub><mo>)</mo></mrow></mfrac></mrow>")
_CONTEXT = f"<mrow><mi>c</mi><mo>=</mo><munder><mo>&#x2211;</mo><mi>s</mi></munder>{_ALPHA}{_HS}</mrow>"


def _math(*rows: str) -> str:
    lines = "".join(f"<mtr><mtd>{row}</mtd></mtr>" for row in rows)
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><mtable>{lines}</mtable></math>'


_LOCAL_WINDOW = ("<mrow><mtext>only</mtext><mspace width='0.3em'/><mo>|</mo><mi>s</mi><mo>&#x2212;</mo>"
                 "<msub><mi>p</mi><mi>t</mi></msub><mo>|</mo><mo>&#x2264;</mo><mi>D</mi></mrow>")

#: canonical mechanism name -> MathML of its equations
MATHML = {
    "dot": _math(f"<mrow>{_E}<mo>=</mo>{_H}{_T}{_HS}</mrow>", _SOFTMAX, _CONTEXT),
    "general": _math(f"<mrow>{_E}<mo>=</mo>{_H}{_T}<msub><mi>W</mi><mi>a</mi></msub>{_HS}</mrow>", _SOFTMAX,
                     _CONTEXT),
    "scaled_dot": _math(f"<mrow>{_E}<mo>=</mo><mfrac><mrow><mo>(</mo><msub><mi>W</mi><mi>q</mi></msub>{_H}<mo>)</mo>"
                        f"{_T}<mo>(</mo><msub><mi>W</mi><mi>k</mi></msub>{_HS}<mo>)</mo></mrow>"
                        "<msqrt><mi>d</mi></msqrt></mfrac></mrow>", _SOFTMAX, _CONTEXT),
    "additive": _math(f"<mrow>{_E}<mo>=</mo><msubsup><mi>v</mi><mi>a</mi><mo>&#x22A4;</mo></msubsup><mi>tanh</mi>"
                      f"<mo>(</mo><msub><mi>W</mi><mi>a</mi></msub>{_H}<mo>+</mo><msub><mi>U</mi><mi>a</mi></msub>"
                      f"{_HS}<mo>)</mo></mrow>", _SOFTMAX, _CONTEXT),
    "mean": _math(f"<mrow>{_ALPHA}<mo>=</mo><mfrac><mn>1</mn><mi>S</mi></mfrac></mrow>", _CONTEXT),
    "local-m": _math(f"<mrow><msub><mi>p</mi><mi>t</mi></msub><mo>=</mo><mi>t</mi><mo>,</mo><mspace width='1em'/>"
                     f"{_E}<mo>=</mo>{_H}{_T}<msub><mi>W</mi><mi>a</mi></msub>{_HS}</mrow>",
                     f"<mrow>{_SOFTMAX}<mspace width='1em'/>{_LOCAL_WINDOW}</mrow>", _CONTEXT),
    "local-p": _math("<mrow><msub><mi>p</mi><mi>t</mi></msub><mo>=</mo><mi>S</mi><mo>&#x22C5;</mo><mi>&#x3C3;</mi>"
                     "<mo>(</mo><msubsup><mi>v</mi><mi>p</mi><mo>&#x22A4;</mo></msubsup><mi>tanh</mi><mo>(</mo>"
                     f"<msub><mi>W</mi><mi>p</mi></msub>{_H}<mo>)</mo><mo>)</mo></mrow>",
                     f"<mrow>{_ALPHA}<mo>=</mo><mi>softmax</mi><msub><mrow><mo>(</mo><mi>e</mi><mo>)</mo></mrow>"
                     "<mi>s</mi></msub><mo>&#x22C5;</mo><mi>exp</mi><mo>(</mo><mo>&#x2212;</mo><mfrac><msup><mrow>"
                     "<mo>(</mo><mi>s</mi><mo>&#x2212;</mo><msub><mi>p</mi><mi>t</mi></msub><mo>)</mo></mrow>"
                     "<mn>2</mn></msup><mrow><mn>2</mn><msup><mi>&#x3C3;</mi><mn>2</mn></msup></mrow></mfrac>"
                     f"<mo>)</mo><mspace width='1em'/>{_LOCAL_WINDOW}</mrow>", _CONTEXT),
}


def equation_mathml(mechanism: str) -> str | None:
    """The MathML of a built-in mechanism (its canonical name), None for any other."""
    return MATHML.get(mechanism)
