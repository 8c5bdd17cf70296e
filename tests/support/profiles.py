"""The hypothesis settings profiles, registered and loaded once for the whole session.

``HYPOTHESIS_PROFILE`` picks one: ``quick`` (5 examples, the quick run), ``ci`` (30, the default
where the ``CI`` environment variable is set, as CI sets it), ``dev`` (40, the default elsewhere),
``thorough`` (500). A test that needs another count says so with its
own ``@settings``; under ``quick`` that count is capped at the profile's 5 too (see
``pytest_collection_modifyitems``), so the quick run is quick for the kernel properties that ask
for hundreds of examples, while every other profile runs each test's own count. Loaded from the
root conftest as a plugin, so no suite's helper module can override another's choice by being
imported last.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = {"quick": 5, "ci": 30, "dev": 40, "thorough": 500}

for _name, _count in EXAMPLES.items():
    settings.register_profile(
        _name,
        max_examples=_count,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


def at_most(count: int) -> int:
    """``count`` examples, or the quick profile's when that is fewer: for a property defined inside
    a test's body, which collection cannot reach (``@settings(max_examples=at_most(150))``)."""
    return min(count, EXAMPLES["quick"]) if PROFILE == "quick" else count


def capped(test: object, cap: int) -> bool:
    """Cap the examples of the hypothesis test ``test`` at ``cap``, keeping its other settings;
    True when its own ``@settings`` asked for more. Hypothesis keeps a test's settings in the
    attribute its own pytest plugin reads, ``_hypothesis_internal_use_settings``, read again at
    every call, so setting it at collection takes effect; a test without it is left alone."""
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if not getattr(test, "is_hypothesis_test", False) or own is None or own.max_examples <= cap:
        return False
    test._hypothesis_internal_use_settings = settings(own, max_examples=cap)  # type: ignore[attr-defined]
    return True


def pytest_collection_modifyitems(items: list) -> None:
    """Under ``quick``, no property runs more than the profile's examples, its own count or not."""
    if PROFILE != "quick":
        return
    for item in items:
        capped(getattr(item, "function", None), EXAMPLES["quick"])
