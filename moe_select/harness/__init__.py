"""The harness wing: what runs MoE layers for people rather than for engines.

- :mod:`~moe_select.harness.run`: ``moe-select run`` (one process: plan, resolve, build a layer of a real
  model config, run it, compare with the float64 reference);
- :mod:`~moe_select.harness.launch`: ``moe-select run --nproc N`` and the process launcher that the
  distributed tests and benchmarks share;
- :mod:`~moe_select.harness.weights`: the one seeded synthetic-weights and token generator used by
  ``run``, ``run --nproc``, ``resolve(verify=True)``, the tests and the benchmarks;
- :mod:`~moe_select.harness.memory`: the one memory estimator.

Nothing in the selection or resolution path imports this package.
"""
