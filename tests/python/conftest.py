"""pytest hooks for tests/python; the shared setup (skip levels, package import, data) is support.py."""

import support


def pytest_report_header(config):
    return support.environment_summary()
