"""CBRL's posterior encoder: masking is exact and finite, the KL is right, gradients reach the encoder."""

from __future__ import annotations

import torch

from model.contract import SLOTS_PER_DAY
from model.features import N_FEATURES
from model.trajectory import prefix_mask as numpy_prefix_mask
from model.trajectory import transitions
from training.rl.encoder import PosteriorEncoder, kl_to_standard_normal

DIM = 2 * N_FEATURES + 1


def prefix_mask(lengths: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(numpy_prefix_mask(lengths.numpy()))


def _batch(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    observations = torch.rand(n, SLOTS_PER_DAY + 1, N_FEATURES, generator=g)
    ratios = 4 * torch.rand(n, SLOTS_PER_DAY, generator=g)
    return torch.as_tensor(transitions(observations.numpy(), ratios.numpy())), torch.tensor([0, 1, 5, 24, 47, 48][:n])


def test_padded_steps_change_nothing():
    torch.manual_seed(0)
    encoder = PosteriorEncoder(DIM).eval()
    steps, lengths = _batch()
    mask = prefix_mask(lengths)
    with torch.no_grad():
        mean, std = encoder(steps, mask)
        scrambled = torch.where(mask.unsqueeze(-1), steps, torch.randn_like(steps) * 100)
        mean2, std2 = encoder(scrambled, mask)
        # Truncating the padding away entirely gives the same answer too.
        mean3, std3 = encoder(steps[3:4, :24], mask[3:4, :24])
    torch.testing.assert_close(mean, mean2, rtol=0, atol=1e-6)
    torch.testing.assert_close(std, std2, rtol=0, atol=1e-6)
    torch.testing.assert_close(mean[3:4], mean3, rtol=0, atol=1e-5)
    torch.testing.assert_close(std[3:4], std3, rtol=0, atol=1e-5)
    assert torch.isfinite(mean).all() and torch.isfinite(std).all() and (std > 0).all()
    # The empty trajectory (slot 0) is finite and equals the heads' bias answer.
    torch.testing.assert_close(mean[0], encoder.mean_head.bias.detach())


def test_valid_steps_do_change_the_posterior():
    torch.manual_seed(0)
    encoder = PosteriorEncoder(DIM).eval()
    steps, lengths = _batch()
    mask = prefix_mask(lengths)
    changed = steps.clone()
    changed[:, 0] += 1.0  # step 0 is valid for every row but the empty one
    with torch.no_grad():
        mean, _ = encoder(steps, mask)
        mean2, _ = encoder(changed, mask)
    assert torch.equal(mean[0], mean2[0])
    assert (mean[1:] - mean2[1:]).abs().sum(dim=1).min() > 1e-4


def test_kl_and_gradients():
    mean = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    std = torch.tensor([[1.0, 1.0], [1.0, 2.0]])
    # KL(N(0,1)||N(0,1)) = 0; second row: 0.5 * (1 + 0) + 0.5 * (4 - 1 - 2 ln 2).
    expected = torch.tensor([0.0, 0.5 + 0.5 * (3 - 2 * torch.log(torch.tensor(2.0)))])
    torch.testing.assert_close(kl_to_standard_normal(mean, std), expected)
    encoder = PosteriorEncoder(DIM)
    steps, lengths = _batch()
    mean, std = encoder(steps, prefix_mask(lengths))
    (mean + torch.randn_like(std) * std).pow(2).sum().backward()
    assert all(p.grad is not None for p in encoder.embed.parameters())


def test_every_prefix_equals_encoding_each_prefix():
    """One causal pass gives q(z | tau_t) for every t, the same as masking the trajectory after t."""
    torch.manual_seed(0)
    encoder = PosteriorEncoder(DIM).eval()
    steps, _ = _batch(3)
    with torch.no_grad():
        every_mean, every_std = encoder.every_prefix(steps)
        for t in (0, 1, 7, 30, SLOTS_PER_DAY):
            mean, std = encoder(steps, prefix_mask(torch.full((3,), t)))
            torch.testing.assert_close(every_mean[:, t], mean, rtol=0, atol=1e-5)
            torch.testing.assert_close(every_std[:, t], std, rtol=0, atol=1e-5)
