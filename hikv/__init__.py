"""HiKV co-design kit: RTL (hikv.hw), golden model (hikv.model), cost and serving models
(hikv.sim), command line (hikv.scripts). Parameters live in :mod:`hikv.params`."""

__version__ = "0.1.0"
