"""Lets the example extensions' tests import the SDK from this repository.

``gateway/python`` holds ``blockether.vis.extension``; the gateway ships the same files
inside its binary. Every test starts and ends without a host bridge or registrations.
"""

import os
import sys

import pytest

_SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gateway", "python")
_SDK = os.path.normpath(_SDK)
if _SDK not in sys.path:
    sys.path.insert(0, _SDK)

from blockether.vis.extension import _host, _registry  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_sdk_state():
    _host.set_bridge(None)
    _registry.reset()
    token = _host._OWNER.set(None)
    yield
    _host.set_bridge(None)
    _registry.reset()
    _host._OWNER.reset(token)
