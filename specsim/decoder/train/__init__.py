"""Training the drafters that need training (a distilled draft model, Medusa heads, an EAGLE head) on
the real target, SmolLM2-135M-Instruct, with PyTorch on the CPU (`pip install -e '.[train]'`).

Pipeline (one command, `specsim decoder train --out DIR`, deterministic for a seed):
1. `corpus`: real text — Python standard-library source for code, the public-domain books under
   data/corpora for prose — split into a training part and a held-out part that training never sees
   (the code-edit workload's modules and the last tenth of each book are held out), plus chat-format
   prompts answered by the target itself (self-distillation, as Medusa-2 and EAGLE recommend).
2. `teacher`: the target (specsim's numba decoder, the very forward pass speculation verifies
   against) run over that text: its final-norm hidden state and its top next-token probabilities at
   every position.
3. `nets` and `fit` (torch): the three drafters trained on the teacher's records.
4. `export`: fp16 weights into the package (specsim/decoder/weights), read at run time by
   `specsim.decoder.trained` with numpy and the numba kernels: no torch needed to use them.

Only `nets`, `fit` and `run` import torch.
"""
