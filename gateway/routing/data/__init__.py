"""The tier classifier's data: real prompts read from installed packages (``sources``), their tier
labels (``labels``), near-duplicate detection (``near_duplicates``) and the training corpus built
from them (``corpus``). Used to train and evaluate; the gateway never imports it."""
