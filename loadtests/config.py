"""What the Locust users send and with which keys, read once from ``SORTYARD_LOADTEST_*``.

Pure (no Locust import). ``run.py`` sets these variables for the Locust process it starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV_PREFIX = "SORTYARD_LOADTEST_"
USER_CLASSES = (
    "ChatUser",
    "StreamingUser",
    "SharedPromptUser",
    "CacheHeavyUser",
    "AutoTierUser",
    "OverLimitUser",
)
"""Every user class in ``users.py``; ``run.py --classes`` picks among them."""
REQUEST_NAMES = {
    "ChatUser": ("chat",),
    "StreamingUser": ("stream",),
    "SharedPromptUser": ("shared-prompt",),
    "CacheHeavyUser": ("cached",),
    "AutoTierUser": ("auto",),
    "OverLimitUser": ("over-limit", "over-limit 429"),
}
"""The Locust request names each class reports (any one of them shows the class made requests)."""


@dataclass(frozen=True, slots=True)
class LoadTestConfig:
    """The load test's settings (each field is ``SORTYARD_LOADTEST_<FIELD>`` in upper case)."""

    key: str = "sk-anything"
    """API key every user but the over-limit one sends (``SORTYARD_LOADTEST_KEY``)."""
    limited_key: str | None = None
    """A key with a tiny limit (``SORTYARD_LOADTEST_LIMITED_KEY``); unset: no over-limit user."""
    model: str = "gpt-4o-mini"
    """Model name of the fixed-tier users."""
    auto_model: str = "auto"
    """Model name that asks the gateway to pick the tier."""
    max_tokens: int = 48
    """max_tokens of every request: long enough to measure decode speed, short on a CPU engine."""
    timeout_s: float = 180.0
    """Per request; a CPU engine under load answers slowly but must answer."""
    shape: str = "steady"
    """steady, ramp or burst (see shapes.py)."""
    no_wait: bool = False
    """Users send their next request at once, no think time (``SORTYARD_LOADTEST_NO_WAIT=1``): to
    find the most requests a second a Locust process (or the gateway) manages."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LoadTestConfig:
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name.upper())
            return value if value else None

        defaults = cls()
        return cls(
            key=get("key") or defaults.key,
            limited_key=get("limited_key"),
            model=get("model") or defaults.model,
            auto_model=get("auto_model") or defaults.auto_model,
            max_tokens=int(get("max_tokens") or defaults.max_tokens),
            timeout_s=float(get("timeout_s") or defaults.timeout_s),
            shape=get("shape") or defaults.shape,
            no_wait=get("no_wait") == "1",
        )
