"""The ``hikv`` command line. Each subcommand lives in ``cmd_<name>.py`` with
``add_arguments(parser)``, ``HELP`` (one line) and ``run(args) -> int``; heavy imports
(torch, amaranth) stay inside ``run`` so ``hikv --help`` is fast."""
