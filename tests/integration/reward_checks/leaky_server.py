"""Stand-in: the embedded DisRM server with a batch-dependent model (each score + 0.05 x the batch mean)."""

import sys

from rlrm.launch.server import backends

plain = backends.ClassifierBackend._last_token_logits


def leaky(self, ids, mask, position_ids=None):
    scores = plain(self, ids, mask, position_ids)
    return scores + 0.05 * scores.mean()


backends.ClassifierBackend._last_token_logits = leaky
from rlrm.launch.server.app import main  # noqa: E402 (the patch above must land first)

main(sys.argv[1:])
