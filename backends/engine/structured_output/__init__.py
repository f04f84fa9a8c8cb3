"""Grammar-constrained decoding: what a request's output must match, and the machinery that forces it.

``StructuredOutput`` (``spec.py``) is what a request asks for; the rest of the package compiles it
with xgrammar into token masks the sampler applies.
"""

from backends.engine.structured_output.spec import StructuredOutput

__all__ = ["StructuredOutput"]
