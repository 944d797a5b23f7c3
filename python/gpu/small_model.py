"""The small transformer that the GPU scripts train (gpu_check.py and
bench_overhead.py), so that both measure the same workload."""

from __future__ import annotations

VOCAB, WIDTH, SEQ, BATCH = 1000, 256, 128, 16


def small_transformer(dev):
    """A 4-layer encoder language model on `dev` and its AdamW optimizer.
    Seed torch before calling for reproducible weights."""
    import torch

    layer = torch.nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, dropout=0.1, batch_first=True)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, WIDTH),
        torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False),
        torch.nn.Linear(WIDTH, VOCAB),
    ).to(dev)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def token_batches(seed: int = 1):
    """Endless (inputs, targets) batches of random tokens on the CPU,
    the same for the same seed."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    while True:
        x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        yield x, y
