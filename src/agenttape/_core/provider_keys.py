"""The placeholder API key a replay hands SDKs, and the provider key variables a child
program gets it in (the adapter ``sdk_keys`` hands them out)."""

from __future__ import annotations

PLACEHOLDER = "agenttape-replay-placeholder"

PROVIDER_KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "COHERE_API_KEY",
    "CO_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "PERPLEXITY_API_KEY",
    "OPENROUTER_API_KEY",
    "VOYAGE_API_KEY",
    "REPLICATE_API_TOKEN",
)
