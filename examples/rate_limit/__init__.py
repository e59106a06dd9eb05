"""The rate-limit failure: a 429 at peak time read as a price, and the agent quotes it."""
