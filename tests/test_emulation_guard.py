"""Fake CUDA tensors support ops that open a device guard, on a CPU build of torch."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from graphbreak_doctor.emulation import EmulatedDevice

pytestmark = pytest.mark.skipif(torch.backends.cuda.is_built(), reason="a CUDA build has a real guard")


def _guarded_ops():
    w = torch.empty(64, 32, dtype=torch.bfloat16, device="cuda")
    x = torch.empty(8, 64, dtype=torch.bfloat16, device="cuda")
    return w.T.contiguous().shape, (x @ w).shape, w[3:5].shape


def test_guarded_ops_fail_without_emulation():
    with FakeTensorMode(), pytest.raises(Exception, match="not linked with support for cuda"):
        _guarded_ops()


def test_guarded_ops_run_inside_and_the_guard_is_removed_after():
    with EmulatedDevice("sm120"):
        assert _guarded_ops() == (torch.Size([32, 64]), torch.Size([8, 32]), torch.Size([2, 32]))
    test_guarded_ops_fail_without_emulation()
