"""The reference decoder: a real Llama-architecture transformer loaded from GGUF, jitted with numba,
that runs speculative decoding (drafters, tree verification, exact rejection sampling) and measures
acceptance and step times. numba is imported only inside this package."""
