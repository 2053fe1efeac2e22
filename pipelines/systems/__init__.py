"""The learned systems, one folder each: `stages.py` (what they do to the warehouse) and
`plugin.py` (their `LearnedSystem` entry: config, budgets, options, Prefect tasks, report).
`pipelines/registry.py` lists them."""
