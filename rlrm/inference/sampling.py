"""Per-row seeded sampling over a batch of logits: what the rollout engine's decode loops draw with.

    sampler = RowSampler(params, seeds, steps, device)   # one SamplingParams and seed per row
    token, log_prob = sampler.sample(logits, t)          # [B], [B] for decode step t

Row i draws the uniform for its token t from its own seeded CPU generator, up front, so what a request
samples does not depend on the other rows of its batch, nor on the device; nothing in `sample` reads
a value back to the host.
"""

from __future__ import annotations

from rlrm.inference.base import SamplingParams


class RowSampler:
    """Per-row temperature, top-k, top-p and seeded inverse-CDF sampling over a [B, V] batch.

    Row i draws uniform t for its token t from its own generator, up front, so what it samples
    does not depend on the other rows. Unfiltered rows invert the CDF in vocabulary order,
    filtered rows in (stable) descending-probability order; each row always uses the same one.
    """

    def __init__(self, params: list[SamplingParams], seeds: list[int], steps: int, device):
        import torch

        temps = torch.tensor([p.temperature for p in params], dtype=torch.float32)
        self.greedy = (temps <= 0).to(device)  # [B]
        self.temps = torch.where(temps <= 0, torch.ones_like(temps), temps)[:, None].to(device)  # [B, 1]
        self.top_k = torch.tensor([p.top_k if p.top_k > 0 else 2**62 for p in params], device=device)[:, None]
        self.top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)[:, None]
        self.filtered = torch.tensor([p.top_k > 0 or p.top_p < 1.0 for p in params], device=device)  # [B]
        uniforms = torch.full((len(params), steps), 0.5)
        for i, (p, seed) in enumerate(zip(params, seeds)):
            if p.temperature > 0:
                g = torch.Generator().manual_seed(seed)  # CPU generator: the same draws on every device
                uniforms[i, : p.max_new_tokens] = torch.rand(p.max_new_tokens, generator=g)
        self.uniforms = uniforms.to(device)  # [B, T]
        self._refresh()

    def _refresh(self) -> None:
        self.all_greedy = bool(self.greedy.all())
        self.any_greedy = bool(self.greedy.any())
        self.any_filtered = bool((self.filtered & ~self.greedy).any())

    def select(self, keep) -> None:
        """Keep only rows `keep` (the batch was compacted)."""
        for name in ("greedy", "temps", "top_k", "top_p", "filtered", "uniforms"):
            setattr(self, name, getattr(self, name)[keep])
        self._refresh()

    def sample(self, logits, t: int):
        """Tokens [B] for decode step t and their log-probs [B] (float32, before filtering)."""
        import torch

        log_probs = torch.log_softmax(logits / self.temps, dim=-1)  # [B, V]
        if self.all_greedy:
            token = torch.argmax(logits, dim=-1)
        else:
            probs = log_probs.exp()
            u = self.uniforms[:, t]  # [B]
            token = invert_cdf(probs, u)
            if self.any_filtered:
                token = torch.where(self.filtered, self._sample_filtered(probs, u), token)
            if self.any_greedy:
                token = torch.where(self.greedy, torch.argmax(logits, dim=-1), token)
        return token, log_probs.gather(-1, token[:, None]).squeeze(-1)

    def _sample_filtered(self, probs, u):
        import torch

        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # [B, V]
        # top-k keeps every token as likely as the k-th, ties included, as HF's and vLLM's do (bf16 logits tie often)
        kth = sorted_p.gather(-1, self.top_k.clamp(max=probs.shape[-1]) - 1)  # [B, 1]
        sorted_p = sorted_p.masked_fill(sorted_p < kth, 0.0)
        cum = sorted_p.cumsum(-1)
        mass_before = cum - sorted_p  # mass of strictly better tokens; the best token always stays
        sorted_p = sorted_p.masked_fill(mass_before >= self.top_p * cum[:, -1:], 0.0)
        return order.gather(-1, invert_cdf(sorted_p, u)[:, None]).squeeze(-1)


def invert_cdf(weights, u):
    """Index [B] where the running sum of non-negative `weights` [B, V] first exceeds u * total."""
    import torch

    cdf = weights.cumsum(-1)  # [B, V]
    total = cdf[:, -1]
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))  # strictly below total
    index = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    return index.clamp(max=weights.shape[-1] - 1)
