"""Speculative decoding: a proposer drafts a decoding sequence's next tokens, one target forward pass
scores them all, and rejection sampling keeps the longest prefix the target agrees with (``verify``).

``NgramProposer`` (prompt lookup, vLLM's ``ngram``) copies what followed the sequence's last n-gram the
last time it occurred; ``DraftProposer`` runs a smaller model with its own KV cache. ``SpecDecodeStats``
counts drafts and acceptances under vLLM's metric names.
"""

from backends.engine.spec_decode.draft import DraftProposer
from backends.engine.spec_decode.factory import build_proposer
from backends.engine.spec_decode.ngram import NgramProposer
from backends.engine.spec_decode.stats import SpecDecodeStats
from backends.engine.spec_decode.verify import verify

__all__ = ["DraftProposer", "NgramProposer", "SpecDecodeStats", "build_proposer", "verify"]
