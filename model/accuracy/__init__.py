"""The accuracy study on real LMs: perplexity, passkey and RULER-style tasks per KV method and
budget, the iso-accuracy tables, and the seed suites that measure the seed's claims
(docs/accuracy.md).

* :mod:`~hikv.model.accuracy.experiments`  perplexity, passkey, tasks, fidelity, capture; its
  names (with the iso tables') are this package's first ones
* :mod:`~hikv.model.accuracy.iso`          protocols, Wilson intervals, the iso-accuracy table
  (torch-free: the report reads it)
* :mod:`~hikv.model.accuracy.tasks`        the synthetic tasks: cases and scoring
* :mod:`~hikv.model.accuracy.suite`        the whole accuracy study as one resumable run
* :mod:`~hikv.model.accuracy.seed_suite`   the seed suites: protocol x length x task cells, run
  resumably (process pool or Ray)
* :mod:`~hikv.model.accuracy.seed_spec`    the seed suites as data: suites, cells, method specs
* :mod:`~hikv.model.accuracy.seed_trials`  the trial runner: adaptive cells, both protocols of a
  task sharing each trial's prompt pass
* :mod:`~hikv.model.accuracy.seed_tables`  the task filter, iso tables and ``seed_table.md``
* :mod:`~hikv.model.accuracy.journal`      the trial journal that makes an unfinished task cell
  resumable
* :mod:`~hikv.model.accuracy.io`           result files and plots of the accuracy study

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "experiments": ("parse_method", "baseline_specs", "hikv_spec", "text_windows", "perplexity",
                    "PasskeyCase", "passkey_case", "passkey", "task_accuracy", "fidelity",
                    "capture", "CLASSIC_FILLER"),
    "iso": ("PROTOCOLS", "QUESTION_ALIASES", "PPL_PROTOCOL", "ALL_TOKENS", "family",
            "protocol_name", "wilson", "iso_table", "split_prompt", "reductions",
            "iso_accuracy_file", "task_rows_as_cells", "select_rows", "iso_table_tasks",
            "is_think", "keeps_every_token"),
    "tasks": ("TASKS", "TaskCase"),
    "suite": ("Suite", "SUITES", "run_suite"),
    "seed_suite": ("run_seed_suite",),
    "seed_spec": ("SeedSuite", "SEED_SUITES", "Cell"),
    "seed_trials": (),
    "seed_tables": ("task_filter",),
    "journal": ("Journal",),
    "io": ("write_rows", "read_rows"),
})
