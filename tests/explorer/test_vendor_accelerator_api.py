"""The generated backend (`pu1-explorer new mydev`) through every public function of torch.accelerator: the
scenarios that tests/backend/test_accelerator_api.py runs on sim, each in a fresh interpreter importing torch_mydev."""
from __future__ import annotations

import pytest

from tests.backend.accelerator_calls import SCENARIOS
from tests.backend.test_accelerator_api import assert_passed, run_scenario
from tests.explorer.test_new_backend import vendor_backend  # noqa: F401  (the run's one build of mydev)
from tests.vendor_backend import DEVICE


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_generated_backend_answers_or_raises_pytorchs_error(vendor_backend, name):  # noqa: F811
    assert_passed(run_scenario(name, f"torch_{DEVICE}", environment=vendor_backend))
