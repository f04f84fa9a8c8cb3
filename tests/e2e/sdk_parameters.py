"""Every request parameter of the openai SDK's ``create`` methods, each with a value to send and what
``make run``'s stack does with it: ``HONOURED`` (answered: the field does what OpenAI documents, or
is a hint that never changes the output, such as ``metadata`` or ``prompt_cache_key``), ``REFUSED``
(a 400 naming it in ``param``) or ``NOT_FOUND`` (a 404 naming it). A parameter the SDK adds later
fails ``test_the_tables_cover_the_sdk`` until it is put in a table."""

from __future__ import annotations

import inspect
from typing import Any

from openai.resources.chat.completions import Completions as ChatCompletions
from openai.resources.completions import Completions
from openai.resources.embeddings import Embeddings
from openai.resources.responses import Responses

HONOURED = "honoured"
REFUSED = "refused"
NOT_FOUND = "not found"
"""A 404 naming the parameter: what it names does not exist."""
_TRANSPORT = frozenset({"self", "extra_headers", "extra_query", "extra_body", "timeout"})

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
RESPONSES_TOOL: dict[str, Any] = {"type": "function", **WEATHER_TOOL["function"]}

Case = tuple[str, dict[str, Any]]
"""(what the stack does, the request's extra arguments: the parameter and what it needs beside it)"""

CHAT: dict[str, Case] = {
    "messages": (HONOURED, {}),
    "model": (HONOURED, {}),
    "audio": (REFUSED, {"modalities": ["text"], "audio": {"voice": "alloy", "format": "wav"}}),
    "frequency_penalty": (HONOURED, {"frequency_penalty": 0.5}),
    "function_call": (REFUSED, {"function_call": "auto"}),
    "functions": (REFUSED, {"functions": [WEATHER_TOOL["function"]]}),
    "logit_bias": (HONOURED, {"logit_bias": {"13": -100}}),
    "logprobs": (HONOURED, {"logprobs": True}),
    "max_completion_tokens": (HONOURED, {"max_completion_tokens": 4}),
    "max_tokens": (HONOURED, {"max_tokens": 4}),
    "metadata": (HONOURED, {"metadata": {"team": "search"}}),
    "modalities": (REFUSED, {"modalities": ["text", "audio"]}),
    "moderation": (REFUSED, {"moderation": {"model": "omni-moderation-latest"}}),
    "n": (HONOURED, {"n": 2}),
    "parallel_tool_calls": (HONOURED, {"tools": [WEATHER_TOOL], "parallel_tool_calls": False}),
    "prediction": (HONOURED, {"prediction": {"type": "content", "content": "Hello"}}),
    "presence_penalty": (HONOURED, {"presence_penalty": 0.5}),
    "prompt_cache_key": (HONOURED, {"prompt_cache_key": "tour"}),
    "prompt_cache_options": (HONOURED, {"prompt_cache_options": {"ttl": "30m"}}),
    "prompt_cache_retention": (HONOURED, {"prompt_cache_retention": "in_memory"}),
    "reasoning_effort": (REFUSED, {"reasoning_effort": "high"}),
    "response_format": (HONOURED, {"response_format": {"type": "json_object"}}),
    "safety_identifier": (HONOURED, {"safety_identifier": "user-1"}),
    "seed": (HONOURED, {"seed": 7}),
    "service_tier": (HONOURED, {"service_tier": "auto"}),
    "stop": (HONOURED, {"stop": ["\n"]}),
    "store": (HONOURED, {"store": False}),
    "stream": (HONOURED, {"stream": True}),
    "stream_options": (HONOURED, {"stream": True, "stream_options": {"include_usage": True}}),
    "temperature": (HONOURED, {"temperature": 0.7}),
    "tool_choice": (HONOURED, {"tools": [WEATHER_TOOL], "tool_choice": "required"}),
    "tools": (HONOURED, {"tools": [WEATHER_TOOL]}),
    "top_logprobs": (HONOURED, {"logprobs": True, "top_logprobs": 2}),
    "top_p": (HONOURED, {"top_p": 0.9}),
    "user": (HONOURED, {"user": "user-1"}),
    "verbosity": (REFUSED, {"verbosity": "low"}),
    "web_search_options": (REFUSED, {"web_search_options": {}}),
}

COMPLETIONS: dict[str, Case] = {
    "model": (HONOURED, {}),
    "prompt": (HONOURED, {}),
    "best_of": (REFUSED, {"best_of": 2}),
    "echo": (REFUSED, {"echo": True}),
    "frequency_penalty": (HONOURED, {"frequency_penalty": 0.5}),
    "logit_bias": (HONOURED, {"logit_bias": {"13": -100}}),
    "logprobs": (HONOURED, {"logprobs": 2}),
    "max_tokens": (HONOURED, {"max_tokens": 4}),
    "n": (HONOURED, {"n": 2}),
    "presence_penalty": (HONOURED, {"presence_penalty": 0.5}),
    "seed": (HONOURED, {"seed": 7}),
    "stop": (HONOURED, {"stop": ["\n"]}),
    "stream": (HONOURED, {"stream": True}),
    "stream_options": (HONOURED, {"stream": True, "stream_options": {"include_usage": True}}),
    "suffix": (REFUSED, {"suffix": " end."}),
    "temperature": (HONOURED, {"temperature": 0.7}),
    "top_p": (HONOURED, {"top_p": 0.9}),
    "user": (HONOURED, {"user": "user-1"}),
}

EMBEDDINGS: dict[str, Case] = {
    "input": (HONOURED, {}),
    "model": (HONOURED, {}),
    "dimensions": (REFUSED, {"dimensions": 128}),
    "encoding_format": (HONOURED, {"encoding_format": "base64"}),
    "user": (HONOURED, {"user": "user-1"}),
}

RESPONSES: dict[str, Case] = {
    "input": (HONOURED, {}),
    "model": (HONOURED, {}),
    "access_programs": (REFUSED, {"access_programs": {"cyber": "standard"}}),
    "background": (REFUSED, {"background": True}),
    "background_options": (REFUSED, {"background_options": {"completion_window": "2h"}}),
    "context_management": (REFUSED, {"context_management": [{"type": "compaction"}]}),
    "conversation": (REFUSED, {"conversation": "conv_123"}),
    "image": (REFUSED, {"image": {"context_compression": "enabled"}}),
    "include": (REFUSED, {"include": ["reasoning.encrypted_content"]}),
    "instructions": (HONOURED, {"instructions": "Answer in one word."}),
    "max_output_tokens": (HONOURED, {"max_output_tokens": 16}),
    "max_tool_calls": (HONOURED, {"max_tool_calls": 1}),  # bounds built-in tools only: none run here
    "metadata": (HONOURED, {"metadata": {"team": "search"}}),
    "moderation": (REFUSED, {"moderation": {"model": "omni-moderation-latest"}}),
    "parallel_tool_calls": (HONOURED, {"tools": [RESPONSES_TOOL], "parallel_tool_calls": False}),
    "previous_response_id": (NOT_FOUND, {"previous_response_id": "resp_unknown"}),
    "prompt": (REFUSED, {"prompt": {"id": "pmpt_123"}}),
    "prompt_cache_key": (HONOURED, {"prompt_cache_key": "tour"}),
    "prompt_cache_options": (HONOURED, {"prompt_cache_options": {"ttl": "30m"}}),
    "prompt_cache_retention": (HONOURED, {"prompt_cache_retention": "in_memory"}),
    "reasoning": (REFUSED, {"reasoning": {"effort": "high"}}),
    "safety_identifier": (HONOURED, {"safety_identifier": "user-1"}),
    "service_tier": (HONOURED, {"service_tier": "auto"}),
    "store": (HONOURED, {"store": False}),
    "stream": (HONOURED, {"stream": True}),
    "stream_options": (HONOURED, {"stream": True, "stream_options": {"include_obfuscation": False}}),
    "temperature": (HONOURED, {"temperature": 0.7}),
    "text": (HONOURED, {"text": {"format": {"type": "json_object"}}}),
    "tool_choice": (HONOURED, {"tools": [RESPONSES_TOOL], "tool_choice": "required"}),
    "tools": (HONOURED, {"tools": [RESPONSES_TOOL]}),
    "top_logprobs": (REFUSED, {"top_logprobs": 2}),
    "top_p": (HONOURED, {"top_p": 0.9}),
    "truncation": (HONOURED, {"truncation": "disabled"}),
    "user": (HONOURED, {"user": "user-1"}),
}
"""``previous_response_id`` names an unknown response here: a 404 naming it (a known one is honoured in
``test_agents``)."""

TABLES = {
    "chat": (ChatCompletions.create, CHAT),
    "completions": (Completions.create, COMPLETIONS),
    "embeddings": (Embeddings.create, EMBEDDINGS),
    "responses": (Responses.create, RESPONSES),
}


def sdk_parameters(method: Any) -> set[str]:
    """The request parameters of one of the SDK's ``create`` methods (not its transport options)."""
    return set(inspect.signature(method).parameters) - _TRANSPORT
