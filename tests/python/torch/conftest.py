"""torch backend suite: `-m "not slow"` leaves out the slowest tests."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a torch test that takes long on 2 cores (deselect with -m 'not slow')")
