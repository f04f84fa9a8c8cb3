"""Model building blocks written for a flat (varlen) token batch and a paged KV cache."""
