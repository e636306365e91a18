"""Pallas (Triton backend) GPU kernels for jaxmd_dp's se_e2_a hot spots.

- :mod:`pallas_kernels.neighbor`: ``build(spec, coord, box, atype, *, interpret=False)``, the neighbour
  list (cell list / brute force, PBC triclinic or none, nearest ``sel[t]`` per type, overflow flag).
- :mod:`pallas_kernels.env_mat`: ``env_mat(coord, box, atype, idx, shift, rcut, rcut_smth, davg, dstd,
  *, interpret=False)``, the normalised environment matrix with a kernel backward (prod_force /
  prod_virial) that is itself differentiable (force-loss training).
- :mod:`pallas_kernels.dispatch`: ``use_pallas()`` / ``interpret_mode()`` (``JAXMD_DP_KERNELS``).

This package does not import jaxmd_dp; the jnp reference lives in ``jaxmd_dp.geometry``.
"""

__all__ = ["dispatch", "env_mat", "neighbor"]
