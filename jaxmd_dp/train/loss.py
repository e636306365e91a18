"""DeePMD-kit's energy loss (``ener``, mean squared errors) with lr-dependent prefactors.

    L = pe/N · mean((E − Ê)²) + pf · mean((F − F̂)²) + pv/N · mean((V − V̂)²)

N = atoms per frame. Each prefactor goes from ``start_pref_*`` to ``limit_pref_*`` as the learning rate
decays (:func:`jaxmd_dp.train.schedule.prefactor`); a term whose label is missing in the batch's system
(``find_* = 0``) is dropped. A term whose two prefactors are both 0 is left out of the loss and the
learning curve. Reported: rmse = √L, rmse_e = √mse_e / N (eV/atom), rmse_f (eV/Å), rmse_v = √mse_v / N.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from jaxmd_dp.model.energy import Prediction
from jaxmd_dp.train.schedule import prefactor


class LossPrefs(NamedTuple):
    """start/limit prefactors of the three terms (DeePMD-kit's loss section)."""

    start_pref_e: float = 0.02
    limit_pref_e: float = 1.0
    start_pref_f: float = 1000.0
    limit_pref_f: float = 1.0
    start_pref_v: float = 0.0
    limit_pref_v: float = 0.0

    def terms(self) -> tuple[str, ...]:
        """Which of e, f, v are in the loss (a term with both prefactors 0 is not)."""
        return tuple(k for k in "efv" if getattr(self, f"start_pref_{k}") or getattr(self, f"limit_pref_{k}"))


def energy_loss(pred: Prediction, batch: dict, prefs: LossPrefs, lr, start_lr: float):
    """Loss and metrics for one batch.

    pred: model predictions, energy (nb,) eV, force (nb, natoms, 3) eV/Å, virial (nb, 9) eV.
    batch: labels ``energy``, ``force``, ``virial`` and flags ``find_energy``, ``find_force``, ``find_virial``.
    A merged batch (:mod:`jaxmd_dp.train.merge`) also carries ``nframes`` and ``natoms``, its real frames
    and atoms per frame: the means run over those (its padding holds 0 in labels and predictions).
    Returns (loss, metrics dict with rmse, rmse_e, rmse_f, rmse_v for the terms in the loss; NaN where the
    label is missing).
    """
    if "nframes" in batch:
        nf, natoms = batch["nframes"], batch["natoms"]
        per_frame = lambda x: jnp.sum(x) / (nf * (x.size // x.shape[0]))  # noqa: E731
        per_atom = lambda x: jnp.sum(x) / (nf * natoms * 3)  # noqa: E731
    else:
        natoms = pred.force.shape[1]
        per_frame = per_atom = jnp.mean
    terms = prefs.terms()
    loss = 0.0
    metrics = {}
    if "e" in terms:
        mse = per_frame((pred.energy - batch["energy"]) ** 2)
        pe = prefactor(prefs.start_pref_e, prefs.limit_pref_e, lr, start_lr) * batch["find_energy"]
        loss = loss + pe / natoms * mse
        metrics["rmse_e"] = jnp.where(batch["find_energy"] > 0, jnp.sqrt(mse) / natoms, jnp.nan)
    if "f" in terms:
        mse = per_atom((pred.force - batch["force"]) ** 2)
        pf = prefactor(prefs.start_pref_f, prefs.limit_pref_f, lr, start_lr) * batch["find_force"]
        loss = loss + pf * mse
        metrics["rmse_f"] = jnp.where(batch["find_force"] > 0, jnp.sqrt(mse), jnp.nan)
    if "v" in terms:
        mse = per_frame((pred.virial - batch["virial"]) ** 2)
        pv = prefactor(prefs.start_pref_v, prefs.limit_pref_v, lr, start_lr) * batch["find_virial"]
        loss = loss + pv / natoms * mse
        metrics["rmse_v"] = jnp.where(batch["find_virial"] > 0, jnp.sqrt(mse) / natoms, jnp.nan)
    metrics["rmse"] = jnp.sqrt(loss)
    return loss, metrics
