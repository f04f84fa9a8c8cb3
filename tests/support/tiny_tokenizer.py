"""A tokenizer directory as a model ships it, tiny: a WordLevel ``tokenizer.json`` built with the
``tokenizers`` library and a ``tokenizer_config.json`` with a ChatML-like chat template."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = [
    "<s>",
    "</s>",
    "<|im_start|>",
    "<|im_end|>",
    "[UNK]",
    "system",
    "user",
    "assistant",
    "hi",
    "be",
    "brief",
]
"""The whole vocabulary: a token's id is its index."""
VOCAB = {word: i for i, word in enumerate(WORDS)}
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if tools %}{{ tools | length }} {% endif %}"
    "{% if add_generation_prompt %}<|im_start|> assistant{% endif %}"
)


def tokenizer_dir(path: Path, **config: object) -> Path:
    """Write the tokenizer into ``path``; ``config`` adds to (or replaces) tokenizer_config.json's fields."""
    backend = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(["<s>", "</s>", "<|im_start|>", "<|im_end|>"])
    backend.save(str(path / "tokenizer.json"))
    settings = {"chat_template": TEMPLATE, "bos_token": {"content": "<s>"}, "eos_token": "</s>", **config}
    (path / "tokenizer_config.json").write_text(json.dumps(settings))
    return path
