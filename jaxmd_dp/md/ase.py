"""An ASE calculator for a trained model (needs ASE: ``pip install 'jaxmd_dp[md]'``)."""

from __future__ import annotations

import numpy as np

from jaxmd_dp.api import as_model

try:
    from ase.calculators.calculator import Calculator, PropertyNotImplementedError, all_changes
    from ase.stress import full_3x3_to_voigt_6_stress
except ImportError:
    raise ImportError("DPCalculator needs ASE: pip install 'jaxmd_dp[md]' (or pip install ase)") from None


class DPCalculator(Calculator):
    """ASE calculator for a trained model: ``energy`` / ``free_energy`` (eV), ``forces`` (eV/Å),
    ``energies`` (per atom, eV) and, for periodic atoms, ``stress`` = −virial/volume (eV/Å³, ASE's Voigt
    order xx, yy, zz, yz, xz, xy), from :meth:`Model.predict <jaxmd_dp.model.trained.Model.predict>`.

    model: a :class:`jaxmd_dp.api.Model`, a model path, a Trainer or (hyper, params, stats)
    (:func:`jaxmd_dp.api.as_model`). Chemical symbols map to types through the model's ``type_map``.
    Atoms must be periodic in all three directions or in none.
    """

    implemented_properties = ["energy", "free_energy", "forces", "stress", "energies"]

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = as_model(model)

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        pbc = np.asarray(atoms.pbc, bool)
        if pbc.any() and not pbc.all():
            raise PropertyNotImplementedError(
                f"DPCalculator: pbc={pbc.tolist()}; periodic in all three directions or in none"
            )
        box = atoms.cell.array.astype(np.float64) if pbc.all() else None
        pred = self.model.predict(atoms.get_positions(), box, atoms.get_chemical_symbols())
        e = float(pred.energy)
        self.results = {
            "energy": e,
            "free_energy": e,
            "forces": np.array(pred.force),
            "energies": np.array(pred.atom_energy),
        }
        if box is not None:
            virial = np.asarray(pred.virial).reshape(3, 3)
            self.results["stress"] = full_3x3_to_voigt_6_stress(-virial / atoms.get_volume())
