"""gocl's test machinery for users' suites: the pytest plugin
(``@pytest.mark.ranks(n)``: plugin), the zygote that forks ranks before any
library is loaded (zygote), and the runner each rank executes (runner)."""
