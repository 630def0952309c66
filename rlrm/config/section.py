"""The base of every profile section: unknown keys refused, assignments validated, NaN and inf refused.

class TrainerConfig(Section):
    lr: float = Field(1e-6, gt=0)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # NaN and inf are refused in every float field unless the field says otherwise: `actor.lr=inf`
    # would pass a `gt=0` bound and turn every weight into inf at the first update.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
