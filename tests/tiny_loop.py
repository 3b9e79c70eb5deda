"""Shared by the closed-loop tests: a tiny GGUF, a catalog-shaped model file for it, a handmade CPU
profile and stack, written into one folder."""
from __future__ import annotations

from pathlib import Path


def write_tiny_loop(d: Path, *, n_ctx: int) -> Path:
    """Write tiny.gguf, tiny-model.toml, cpu.toml and stack.toml into `d`; the GGUF's path."""
    from specsim.decoder.testing import tiny_vocab, write_tiny_gguf
    from specsim.specs.catalog import to_toml

    gguf = write_tiny_gguf(d / "tiny.gguf", n_ctx=n_ctx)
    (d / "tiny-model.toml").write_text(to_toml({
        "id": "tiny-model", "name": "tiny", "tokenizer": "tiny", "n_layers": 3, "hidden_size": 64, "n_heads": 4,
        "n_kv_heads": 2, "head_dim": 16, "ffn_size": 128, "vocab_size": len(tiny_vocab()), "max_context": n_ctx,
        "weight_format": "gguf-q4_1", "kv_cache_dtype": "fp32", "sources": {"shape": "specsim.decoder.testing"}}))
    (d / "cpu.toml").write_text(to_toml({
        "id": "cpu", "name": "test cpu", "kind": "cpu", "memory_gb": 16, "mem_bandwidth_gb_s": 20,
        "peak_tflops": {"int8": 1.0, "fp32": 0.2}, "sources": {"memory_gb": "test", "mem_bandwidth_gb_s": "test",
                                                                "peak_tflops": "test"}}))
    (d / "stack.toml").write_text(to_toml({
        "id": "stack", "name": "test stack", "version": "1", "bandwidth_frac": 0.5, "compute_frac": 0.3,
        "step_overhead_us": 50, "methods": ["prompt_lookup", "layer_skip"],
        "sources": {"bandwidth_frac": "test", "compute_frac": "test", "step_overhead_us": "test", "methods": "test"}}))
    return gguf
