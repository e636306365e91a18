"""jax-md's metal units (Å, eV, amu): the Boltzmann constant, the femtosecond, atomic masses."""

from __future__ import annotations

import math

import numpy as np

from jaxmd_dp.errors import InputError

#: Boltzmann constant, eV/K (CODATA 2018).
KB = 8.617333262e-5
_AMU_KG, _EV_J, _ANGSTROM_M = 1.66053906660e-27, 1.602176634e-19, 1e-10
#: One femtosecond in the time unit of (amu, Å, eV): 1 fs / sqrt(amu·Å²/eV) = 0.09822694…
#: (jax-md's ``units.metal_unit_system()['time']`` / 1000). A 0.5 fs step is ``dt = 0.5 * FS``.
FS = 1e-15 / math.sqrt(_AMU_KG * _ANGSTROM_M**2 / _EV_J)

# Standard atomic weights (amu) of common elements, used when ASE is not installed.
_MASSES = {
    "H": 1.008,
    "He": 4.0026,
    "Li": 6.94,
    "Be": 9.0122,
    "B": 10.81,
    "C": 12.011,
    "N": 14.007,
    "O": 15.999,
    "F": 18.998,
    "Na": 22.990,
    "Mg": 24.305,
    "Al": 26.982,
    "Si": 28.085,
    "P": 30.974,
    "S": 32.06,
    "Cl": 35.45,
    "K": 39.098,
    "Ca": 40.078,
    "Ti": 47.867,
    "Fe": 55.845,
    "Ni": 58.693,
    "Cu": 63.546,
    "Zn": 65.38,
    "Ag": 107.87,
    "Au": 196.97,
}


def masses(type_map, atype) -> np.ndarray:
    """Atomic masses (natoms,) in amu from element symbols (``type_map[atype[i]]``), ASE's table when
    installed (O 15.999, H 1.008)."""
    try:
        from ase.data import atomic_masses, atomic_numbers

        table = lambda s: float(atomic_masses[atomic_numbers[s]])  # noqa: E731
    except ImportError:
        table = _MASSES.__getitem__
    try:
        per_type = np.array([table(s) for s in type_map])
    except KeyError as e:
        raise InputError(f"no atomic mass known for element {e.args[0]!r} (type_map {list(type_map)})") from None
    return per_type[np.asarray(atype)]
