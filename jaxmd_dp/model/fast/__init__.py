"""Rewrites of the model's computation for speed, each giving DeePMD-kit's numbers (to rounding).

The model (:mod:`jaxmd_dp.model.energy`, :mod:`~jaxmd_dp.model.se_e2_a`, :mod:`~jaxmd_dp.model.fitting`)
states DeePMD's maths; an :class:`~jaxmd_dp.model.plan.ExecutionPlan` chooses these paths, and a
descriptor's :attr:`~jaxmd_dp.model.descriptor.Descriptor.fast_paths` say which apply to it.

- :mod:`.type_groups`: per-type nets on their type's atoms only, in fixed-capacity blocks (``plan.capacity``).
- :mod:`.net_groups`: nets of one shape (the embedding nets, the fitting nets) run stacked, as one program
  whatever the number of types (chosen by :func:`.net_groups.stack_nets`).
- :mod:`.pair_pack`: the embedding nets on real neighbour pairs only, empty slots counted exactly
  (``plan.pack``, ``plan.keep``, ``plan.uniform_empty``, ``plan.partner``; ``training.pair_packing``).
- :mod:`.embed_table`: Rᵀ·G from a node table of each embedding net (``plan.table``;
  ``training.embedding_table``).
- :mod:`.embed_slope`: an embedding net's value and slope in one pass, with a written-out weight VJP.
- :mod:`.train_products`: the descriptor's per-atom products with written-out derivatives.
- :mod:`.bilinear`: bilinear products with written-out transposes (used by the two above).
- :mod:`.row_take`: row gathers whose transpose is a gather too (used by the packing and the type blocks).

Most are the training step's: first derivatives in the coordinates, reverse mode in the weights.
"""
