"""The shipped learned tier classifier (router.bin)."""
