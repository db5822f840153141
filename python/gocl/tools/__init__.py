"""gocl's tools: the ``gocl`` command (cli) and what its subcommands run:
the launcher (``gocl run``), ``gocl perf`` (one host, or many over network
namespaces: perf_hosts, netns), ``gocl status``/``top``, ``gocl trace`` and
``gocl doctor``. They use the library's front ends; nothing in the front ends
depends on them except the launcher's world and environment helpers."""
