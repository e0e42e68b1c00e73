from __future__ import annotations

import pytest

from kernelrl.evaluate import EvalPool
from tests.agent.helpers import EVAL


@pytest.fixture(scope="session")
def pool():
    with EvalPool(workers=2, config=EVAL) as pool:
        yield pool
