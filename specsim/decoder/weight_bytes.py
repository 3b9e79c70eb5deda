"""What one forward pass of the decoder's model streams from memory: the weights of the layers it runs
and the LM head. On a memory-bound CPU that is the pass's cost, which is how a drafter that runs part
of the target (layer skip) is compared with a target step, both by the registry's run notes and by
the measurements."""
from __future__ import annotations


def pass_weight_bytes(model, n_layers: int | None = None) -> int:
    """Weight bytes one forward pass streams through the first n_layers layers and the LM head."""
    n = model.config.n_layer if n_layers is None else n_layers
    layer = sum(qt.n_bytes for lw in model.layers[:n] for qt in lw.values() if hasattr(qt, "raw"))
    return int(layer + model.output.n_bytes)
