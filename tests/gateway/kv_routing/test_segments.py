"""gateway/kv_routing/segments.py: a chat prompt encoded a piece at a time between special tokens gives
the whole prompt's ids, on real BPE tokenizers trained here; a conversation's next turn encodes only
its new pieces; a tokenizer the pieces would not agree with encodes whole."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from gateway.kv_routing.segments import SegmentEncoder
from gateway.kv_routing.tokenizer import PromptTokenizer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "You are a helpful assistant. Answer the customer's question about the invoice 2024-17.",
    "Prix : 42,50 € — naïve café 🙂 refund shipping parcel warehouse router firmware update",
    "def f(x):\n    return x**2\n\nThe meeting moved to 10:30; bring the quarterly budget report.",
] * 20


def bpe_dir(path: Path, pre_tokenizer: pre_tokenizers.PreTokenizer, decoder: decoders.Decoder) -> Path:
    """A byte-level (or metaspace) BPE trained on the corpus, with ChatML's special tokens and template."""
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoder
    alphabet = (
        pre_tokenizers.ByteLevel.alphabet() if isinstance(pre_tokenizer, pre_tokenizers.Sequence) else []
    )
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, initial_alphabet=alphabet)
    backend.train_from_iterator(CORPUS, trainer)
    path.mkdir(exist_ok=True)
    backend.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    return path


def byte_level(path: Path) -> Path:  # SmolLM2's and GPT-2's kind
    pre = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    return bpe_dir(path, pre, decoders.ByteLevel())


def conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": CORPUS[0]}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"{CORPUS[1 + t % 2]} (question {t})"})
        messages.append({"role": "assistant", "content": f" {CORPUS[(t + 1) % 3][:40]}  "})
    return [*messages, {"role": "user", "content": "and then?"}]


def whole(tokenizer: PromptTokenizer, messages: list[dict[str, str]]) -> list[int]:
    assert tokenizer.template is not None
    text = tokenizer.template.render(messages=messages, add_generation_prompt=True)
    return list(tokenizer.backend.encode(text, add_special_tokens=False).ids)


def test_pieces_give_the_whole_prompts_ids_and_a_next_turn_encodes_only_what_is_new(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(byte_level(tmp_path))
    assert tokenizer.cuts_chats
    for turns in range(1, 6):
        assert tokenizer.prompt_ids({"messages": conversation(turns)}) == whole(
            tokenizer, conversation(turns)
        )
    segments = tokenizer.segments
    misses = segments.num_misses
    tokenizer.prompt_ids({"messages": conversation(6)})
    assert segments.num_misses - misses == 1  # the new question: the history, replies and roles are known


def test_a_long_chat_prompt_is_cut_as_before(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(byte_level(tmp_path))
    body = {"messages": conversation(40)}
    for max_tokens in (7, 100, 333):
        head = tokenizer.prompt_ids(body, max_tokens=max_tokens)
        assert head is not None and head == whole(tokenizer, conversation(40))[: len(head)]
        assert max_tokens - len(head) < 20  # only the tokens near the cut are dropped


def test_a_tokenizer_that_treats_its_first_piece_apart_encodes_whole(tmp_path: Path) -> None:
    """Metaspace adding a prefix space to the input's first piece only (Llama 2's converted
    tokenizers): a piece encoded alone would get one too, so the check refuses cutting."""
    metaspace = bpe_dir(tmp_path, pre_tokenizers.Metaspace(prepend_scheme="first"), decoders.Metaspace())
    tokenizer = PromptTokenizer.from_dir(metaspace)
    assert not tokenizer.cuts_chats
    assert tokenizer.prompt_ids({"messages": conversation(3)}) == whole(tokenizer, conversation(3))


def test_a_special_token_that_strips_whitespace_is_no_cut(tmp_path: Path) -> None:
    backend = Tokenizer.from_file(str(byte_level(tmp_path) / "tokenizer.json"))
    backend.add_special_tokens([AddedToken("<|tool|>", rstrip=True, special=True)])
    encoder = SegmentEncoder(backend)
    text = "<|im_start|>user\n<|tool|>  call it<|im_end|>"
    assert encoder.encode(text, 100) == backend.encode(text, add_special_tokens=False).ids
    assert encoder.num_misses == 1  # "user\n<|tool|>  call it" is one piece: <|tool|> is no cut


def test_the_pieces_kept_are_bounded(tmp_path: Path) -> None:
    backend = Tokenizer.from_file(str(byte_level(tmp_path) / "tokenizer.json"))
    encoder = SegmentEncoder(backend, max_chars=100)
    for i in range(20):
        encoder.encode(f"<|im_start|>user\n{CORPUS[1]} {i}<|im_end|>", 1000)
    assert len(encoder._pieces) <= 1 and encoder._num_chars <= 100


def test_new_chars_counts_only_the_pieces_not_kept(tmp_path: Path) -> None:
    """What decides whether a long prompt is encoded in a thread: a long conversation's next turn has
    only its new messages to encode, and stays on the event loop."""
    backend = Tokenizer.from_file(str(byte_level(tmp_path) / "tokenizer.json"))
    encoder = SegmentEncoder(backend)
    history = f"<|im_start|>system\n{CORPUS[0] * 50}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert encoder.new_chars(history) == len(history) - 2 * len("<|im_start|>") - 2 * len("<|im_end|>")
    encoder.encode(history, 10_000)
    assert encoder.new_chars(history + "<|im_start|>user\nand then?") == len("user\nand then?")
