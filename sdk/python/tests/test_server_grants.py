"""Grants, budgets and usage through the SDK against a real `lbb serve` (issue 17)."""

from __future__ import annotations

import uuid

import pytest

import lbb as sdk
from lbb import LbbClient

SUM = "def run(input, config):\n    return sum(input)"


def test_a_grant_stamps_its_step_and_a_budget_refuses_the_next_run(lbb: LbbClient) -> None:
    wf = "wf-" + uuid.uuid4().hex[:8]
    lbb.put_budget(wf, "r1", runs=1)
    g = lbb.mint_grant(workflow=wf, run="r1", step="sum", attempt="1", ttl_seconds=120)
    assert g.token.startswith("lbb_gt_")
    step = lbb.with_api_key(g.token)
    run = step.sandboxes.run(code=SUM, input=[1, 2, 3], idempotency_key="step-" + wf)
    assert run.result == 6
    cmd = lbb.commands.get(run.command)
    assert (cmd.origin["workflow"], cmd.origin["step"], cmd.origin["attempt"], cmd.origin["grant"]) == (wf, "sum", "1", g.id)
    with pytest.raises(sdk.BudgetExceededError):
        step.sandboxes.run(code=SUM, input=[1], idempotency_key="step2-" + wf)
    assert lbb.get_budget(wf, "r1").used["runs"] == 1
    assert lbb.get_grant(g.id).get("token") is None
    u = lbb.usage(group_by="workflow")
    assert any(x.get("group") == wf and x["commands"] == 1 for x in u.groups)
    lbb.revoke_grant(g.id)
    with pytest.raises(sdk.GrantRevokedError):
        step.commands.get(run.command)
