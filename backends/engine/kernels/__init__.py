"""Native kernels the engine builds on first use; each has a pure-torch reference it is tested against."""
