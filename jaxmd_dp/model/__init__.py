"""The Deep Potential energy model, as DeePMD-kit defines it.

- :mod:`.hyper`: the model's hyper-parameters (:class:`~jaxmd_dp.model.hyper.ModelHyper`) and the
  registry of descriptors;
- :mod:`.descriptor`: what a descriptor is to the rest of the code, and how to add one;
- :mod:`.se_e2_a`: the se_e2_a descriptor; :mod:`.fitting`: the energy fitting nets; :mod:`.nets`:
  DeePMD's fully connected layers;
- :mod:`.energy`: atomic energies, energy, forces and virial, the statistics;
- :mod:`.plan`: how a prediction is executed (:class:`~jaxmd_dp.model.plan.ExecutionPlan`), and
  :mod:`.fast`: the CPU rewrites a plan may choose, each with the same numbers;
- :mod:`.io`, :mod:`.trained`, :mod:`.evaluate`: model files, a model in memory, the prediction path.
"""
