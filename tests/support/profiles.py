"""The hypothesis settings profiles, registered and loaded once for the whole session.

``HYPOTHESIS_PROFILE`` picks one (default ``dev``): ``quick`` (10 examples, the quick run),
``ci`` (30), ``dev`` (40), ``thorough`` (500). A test that needs another count says so with its
own ``@settings``. Loaded from the root conftest as a plugin, so no suite's helper module can
override another's choice by being imported last.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = {"quick": 10, "ci": 30, "dev": 40, "thorough": 500}

for _name, _count in EXAMPLES.items():
    settings.register_profile(
        _name,
        max_examples=_count,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
settings.load_profile(PROFILE)
